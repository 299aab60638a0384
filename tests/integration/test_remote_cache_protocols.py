"""The Remote Execution API (BuildGrid) and the HTTP cache protocol (nginx WebDAV) as
shared caches: a clean clone restores a build made elsewhere, and a blob changed
on the server is a miss and a rebuild, never a wrong output.

The servers run on 127.0.0.1 (tests/integration/cacheservers.py); the builds run
the CLI (`shipyard build --cache=grpc://...` / `--cache=http://...`) in clean
clones with empty local caches.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from shipyard.engine.cache.endpoint import (
    Connection,
    RemoteUnavailable,
    open_remote,
    parse_endpoint,
)
from tests.integration._repo import clone, copy_worktree, shipyard
from tests.integration.cacheservers import (
    CacheServer,
    TlsFiles,
    make_client_certificate,
    running_buildgrid,
    running_nginx,
)
from tests.integration.registries import make_certificates

pytestmark = pytest.mark.integration

SELECTION = ("--target=standard", "--output=wheel,zipapp")
Start = Callable[..., AbstractContextManager[CacheServer]]
SERVERS: dict[str, Start] = {"grpc": running_buildgrid, "http": running_nginx}


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This working tree as a repository the tests clone."""
    return copy_worktree(tmp_path_factory.mktemp("origin"))


def _report(root: Path) -> list[dict[str, object]]:
    actions = json.loads((root / "dist" / "report.json").read_text())["actions"]
    assert isinstance(actions, list)
    return actions


def _statuses(root: Path) -> dict[str, str]:
    return {str(a["id"]): str(a["status"]) for a in _report(root)}


def _outputs(root: Path) -> dict[str, tuple[str, int]]:
    """Every file a build wrote under dist/wheels and dist/zipapps: (sha256, mode)."""
    found: dict[str, tuple[str, int]] = {}
    for folder in ("wheels", "zipapps"):
        for path in sorted((root / "dist" / folder).iterdir()):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            found[f"{folder}/{path.name}"] = (digest, path.stat().st_mode & 0o777)
    return found


def _build(root: Path, cache_dir: Path, url: str, **env: str) -> tuple[float, str]:
    started = time.monotonic()
    done = shipyard(root, "build", *SELECTION, f"--cache={url}", f"--cache-dir={cache_dir}", **env)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-4000:]
    return took, done.stderr


def _shared(origin: Path, tmp_path: Path, server: CacheServer, **env: str) -> None:
    """A build in one clone, then one in a clean clone with an empty local cache, both
    with `env`: the second restores every output of the first and builds nothing."""
    first = clone(origin, tmp_path / "first")
    _build(first, tmp_path / "cache-first", server.url, **env)
    assert any(server.blobs.iterdir()), "nothing was stored"
    second = clone(origin, tmp_path / "second")
    _build(second, tmp_path / "cache-second", server.url, **env)
    assert set(_statuses(second).values()) == {"cached"}
    assert _outputs(second) == _outputs(first)


@pytest.fixture(params=sorted(SERVERS))
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CacheServer]:
    """Each protocol's server, plain."""
    with SERVERS[request.param](tmp_path / "server") as running:
        yield running


def test_a_clean_clone_restores_every_output_and_builds_nothing(
    origin: Path, server: CacheServer, tmp_path: Path
) -> None:
    first = clone(origin, tmp_path / "first")
    cold, _ = _build(first, tmp_path / "cache-first", server.url)
    assert "built" in _statuses(first).values()
    second = clone(origin, tmp_path / "second")
    warm, log = _build(second, tmp_path / "cache-second", server.url)
    statuses = _statuses(second)
    assert set(statuses.values()) == {"cached"}, statuses
    assert _outputs(second) == _outputs(first)  # bytes and modes (a .pyz stays 755)
    assert "ignored" not in log, log
    moved = sum(p.stat().st_size for p in server.blobs.rglob("*") if p.is_file())
    print(f"{server.url}: cold {cold:.1f}s, clean clone {warm:.1f}s, {moved} bytes stored")


def test_a_blob_changed_on_the_server_is_a_miss_and_a_rebuild(
    origin: Path, server: CacheServer, tmp_path: Path
) -> None:
    first = clone(origin, tmp_path / "first")
    _build(first, tmp_path / "cache-first", server.url)
    # meshctl's zipapp: a small blob (a batch read over gRPC, one GET over HTTP).
    entry = next(a for a in _report(first) if a["id"] == "zipapp:meshctl")
    artifacts = entry["outputs"]
    assert isinstance(artifacts, list) and len(artifacts) == 1
    sha256 = str(artifacts[0]["sha256"])
    stored = server.blob(sha256)
    assert stored.is_file(), f"{server.url} keeps {sha256} elsewhere"
    # Other bytes under the same name, behind the server's back (neither checks on read).
    stored.write_bytes(stored.read_bytes()[::-1])
    second = clone(origin, tmp_path / "second")
    _, log = _build(second, tmp_path / "cache-second", server.url)
    statuses = _statuses(second)
    assert statuses.pop("zipapp:meshctl") == "built"
    assert set(statuses.values()) == {"cached"}, statuses
    assert "ignored" in log and sha256 in log, log
    assert _outputs(second) == _outputs(first)


@pytest.mark.parametrize("protocol", sorted(SERVERS))
def test_mutual_tls_with_the_files_from_the_environment(
    origin: Path, protocol: str, tmp_path: Path
) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    client_cert, client_key = make_client_certificate(certs)
    tls = TlsFiles(*make_certificates(certs), clients=client_cert)
    with SERVERS[protocol](tmp_path / "server", tls=tls) as server:
        assert server.url.startswith(("grpcs://", "https://"))
        # Without the client certificate the server refuses: unavailable, never a hit.
        anonymous = Connection(ca_file=tls.ca, timeout=5.0, retries=0)
        with pytest.raises(RemoteUnavailable):
            open_remote(parse_endpoint(server.url), anonymous).restore("key", tmp_path / "x")
        env = {
            "SHIPYARD_CACHE_CA": str(tls.ca),
            "SHIPYARD_CACHE_CERT": str(client_cert),
            "SHIPYARD_CACHE_KEY": str(client_key),
        }
        _shared(origin, tmp_path, server, **env)


def test_http_basic_credentials_come_from_the_environment(origin: Path, tmp_path: Path) -> None:
    users = {"ci": "s3cret"}
    with running_nginx(tmp_path / "server", users=users) as server:
        env = {"SHIPYARD_CACHE_USER": "ci", "SHIPYARD_CACHE_PASSWORD": "s3cret"}
        _shared(origin, tmp_path, server, **env)


def test_http_token_and_api_key_headers_come_from_the_environment(
    origin: Path, tmp_path: Path
) -> None:
    wanted = {"authorization": "Bearer t0ken", "x-api-key": "k3y"}
    with running_nginx(tmp_path / "server", headers=wanted) as server:
        without = Connection(timeout=5.0, retries=0)
        with pytest.raises(RemoteUnavailable, match=r"HTTP 401.*SHIPYARD_CACHE_TOKEN"):
            open_remote(parse_endpoint(server.url), without).restore("key", tmp_path / "x")
        env = {"SHIPYARD_CACHE_TOKEN": "t0ken", "SHIPYARD_CACHE_HEADERS": "x-api-key=k3y"}
        _shared(origin, tmp_path, server, **env)
