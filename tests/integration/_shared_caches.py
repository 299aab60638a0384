"""Shared cache servers of each protocol, started for one test on 127.0.0.1.

The policy tests (test_remote_cache_policy.py), the sharded build (test_shards.py)
and the benchmark (benchmarks/remote_cache.py) take a `CacheServer` from `STARTERS`
by protocol name, so one test runs against every protocol: `oci` is a CNCF
distribution registry of the test's own (tests/integration/registries.py), `grpc`
a cache-only BuildGrid and `http` nginx with WebDAV (tests/integration/cacheservers.py).
Each returns a `CacheServer` with:

- `url`: the `--cache=` URL of an empty cache;
- `entries()`: the actions the server holds (to show nothing was written): the
  registry's tags, the files under nginx's `ac/` folder, the Action digests
  BuildGrid's ActionCache answers for (asked through its API for each Command
  of shipyard's in its CAS folder: its in-memory ActionCache lists nothing);
- `stop()`: stop the server for good (a server gone mid-build);
- `slow(seconds)`: a context giving the URL of the same cache whose every answer
  comes after `seconds` (faultproxy's HTTP stall; for gRPC, which speaks HTTP/2,
  stallproxy's TCP-level one);
- `read_only()`: a context giving the URL of the same cache on a server that
  takes no writes, and the environment a client needs there: a registry whose
  token issuer grants pulls only; nginx answering every PUT 403; a BuildGrid whose
  ActionCache reads the first server's and takes no updates.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from shipyard.engine.cache.endpoint import Connection, parse_endpoint
from shipyard.oci.remote.registry import NotFound, Registry
from tests.integration import cacheservers
from tests.integration.conftest import require_services
from tests.integration.faultproxy import running_proxy
from tests.integration.registries import (
    PASSWORD,
    USER,
    TokenIssuer,
    registry_binary,
    running_registry,
    running_token_server,
)
from tests.integration.stallproxy import running_stall

__all__ = [
    "STARTERS",
    "CacheServer",
    "Starter",
    "buildgrid_cache",
    "cache_server",
    "missing",
    "nginx_cache",
    "registry_cache",
]


@dataclass
class CacheServer:
    """One running cache server, as the policy tests use it (see the module docstring)."""

    protocol: str
    url: str
    entries: Callable[[], set[str]]
    stop: Callable[[], None]
    slow: Callable[[float], AbstractContextManager[str]] | None = None
    read_only: Callable[[], AbstractContextManager[tuple[str, dict[str, str]]]] | None = None
    log: Path | None = None


Starter = Callable[[Path], AbstractContextManager[CacheServer]]


@contextmanager
def registry_cache(folder: Path) -> Iterator[CacheServer]:
    """A registry of this test's own (its own port, storage and log), one repository."""
    repository = f"shipyard-cache/{uuid.uuid4().hex[:12]}"
    with ExitStack() as server:  # closed early by `stop`; closing again does nothing
        registry = server.enter_context(running_registry(folder))
        client = Registry(registry.host, environ={"DOCKER_CONFIG": "/nonexistent"})
        server.callback(client.close)

        def entries() -> set[str]:
            try:
                return set(client.tags(repository))
            except NotFound:
                return set()

        @contextmanager
        def slow(seconds: float) -> Iterator[str]:
            # Every request stalls `seconds` before the proxy closes it without an answer.
            options = {"rate": 1.0, "kinds": ("stall",), "stall_seconds": seconds}
            with running_proxy(registry.host, **options) as proxy:
                yield f"oci://{proxy.host}/{repository}"

        @contextmanager
        def read_only() -> Iterator[tuple[str, dict[str, str]]]:
            # A second registry on the same storage, behind docker's token auth with
            # an issuer that grants pulls only: pushes are refused (HTTP 401).
            view = folder / "read-only"
            view.mkdir()
            (folder / "data").mkdir(exist_ok=True)
            (view / "data").symlink_to(folder / "data")
            issuer = TokenIssuer(view, USER, PASSWORD)
            issuer.allowed = {"pull"}
            with (
                running_token_server(issuer) as realm,
                running_registry(view, token=(issuer, realm)) as pulls_only,
            ):
                env = {"SHIPYARD_CACHE_USER": USER, "SHIPYARD_CACHE_PASSWORD": PASSWORD}
                yield f"oci://{pulls_only.host}/{repository}", env

        url = f"oci://{registry.host}/{repository}"
        yield CacheServer("oci", url, entries, server.close, slow, read_only, registry.log)


@contextmanager
def nginx_cache(folder: Path) -> Iterator[CacheServer]:
    """nginx with WebDAV serving the HTTP cache protocol (cacheservers.running_nginx)."""
    with cacheservers.running_nginx(folder / "server") as nginx:
        actions = nginx.blobs.parent / "ac"

        def entries() -> set[str]:
            return {p.name for p in actions.iterdir()} if actions.is_dir() else set()

        @contextmanager
        def slow(seconds: float) -> Iterator[str]:
            options = {"rate": 1.0, "kinds": ("stall",), "stall_seconds": seconds}
            with running_proxy(f"127.0.0.1:{nginx.port}", **options) as proxy:
                yield f"http://{proxy.host}/{nginx.url.rsplit('/', 1)[1]}"

        @contextmanager
        def read_only() -> Iterator[tuple[str, dict[str, str]]]:
            # A second nginx serving the same folder, GET and HEAD only.
            view = folder / "read-only"
            view.mkdir()
            (view / "data").symlink_to(nginx.blobs.parents[1])
            with cacheservers.running_nginx(view, read_only=True) as reads:
                yield reads.url, {}

        yield CacheServer("http", nginx.url, entries, nginx.stop, slow, read_only, nginx.log)


@contextmanager
def buildgrid_cache(folder: Path) -> Iterator[CacheServer]:
    """A cache-only BuildGrid (cacheservers.running_buildgrid)."""
    from shipyard.engine.cache.reapi import open_grpc_cache
    from shipyard.engine.cache.reapi.results import FORMAT, action_for
    from shipyard.engine.cache.reapi.stubs import re_pb2

    with cacheservers.running_buildgrid(folder / "server") as grid:
        client = open_grpc_cache(parse_endpoint(grid.url), Connection(timeout=10, retries=0))

        def keys() -> Iterator[str]:
            """shipyard's action keys, from the Commands in the CAS folder."""
            for blob in grid.blobs.glob("*/*"):
                if blob.stat().st_size > 4096:
                    continue
                with contextlib.suppress(Exception):  # other blobs do not parse, or not so
                    command = re_pb2.Command.FromString(blob.read_bytes())
                    if len(command.arguments) == 2 and command.arguments[0] == FORMAT:
                        yield command.arguments[1]

        def entries() -> set[str]:
            digests = {action_for(key).digest.hash: action_for(key).digest for key in keys()}
            return {h for h, digest in digests.items() if client.get_result(digest) is not None}

        @contextmanager
        def slow(seconds: float) -> Iterator[str]:
            with running_stall(f"127.0.0.1:{grid.port}", seconds) as stall:
                yield grid.url.replace(f"127.0.0.1:{grid.port}", stall.host)

        @contextmanager
        def read_only() -> Iterator[tuple[str, dict[str, str]]]:
            view = folder / "read-only"
            with cacheservers.running_buildgrid(view, reads_from=grid) as reads:
                yield reads.url, {}

        try:
            yield CacheServer("grpc", grid.url, entries, grid.stop, slow, read_only, grid.log)
        finally:
            client.close()


def _registry_missing() -> str | None:
    if registry_binary() is None:
        return "docker-registry is not installed (apt-get install docker-registry)"
    return None


def _installed(program: Callable[[], str]) -> Callable[[], str | None]:
    """Why `program` (a cacheservers lookup, which skips without it) cannot run, or None."""

    def why() -> str | None:
        try:
            program()
        except (pytest.skip.Exception, pytest.fail.Exception) as exc:
            return str(exc)
        return None

    return why


# Protocol -> (starter, why it cannot run here or None).
STARTERS: dict[str, tuple[Starter, Callable[[], str | None]]] = {
    "grpc": (buildgrid_cache, _installed(cacheservers.buildgrid_binary)),
    "http": (nginx_cache, _installed(cacheservers.nginx_binary)),
    "oci": (registry_cache, _registry_missing),
}


def missing(protocol: str) -> str | None:
    """Why `protocol`'s server cannot start on this machine, or None."""
    with contextlib.suppress(KeyError):
        return STARTERS[protocol][1]()
    return f"no starter for {protocol}:// caches"


@pytest.fixture(params=sorted(STARTERS))
def cache_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CacheServer]:
    """A fresh cache server of each protocol in STARTERS, for this test alone; a
    protocol whose server is not installed is skipped (failed under
    SHIPYARD_REQUIRE_SERVICES=1, as CI runs)."""
    protocol = str(request.param)
    why = missing(protocol)
    if why is not None:
        if require_services():
            pytest.fail(f"{protocol}:// cache server: {why}")
        pytest.skip(f"{protocol}:// cache server: {why}")
    start, _ = STARTERS[protocol]
    with start(tmp_path / f"{protocol}-server") as server:
        yield server
