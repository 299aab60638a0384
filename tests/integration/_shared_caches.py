"""Shared cache servers of each protocol, started for one test on 127.0.0.1.

The policy tests (test_remote_cache_policy.py), the sharded build (test_shards.py)
and the benchmark (benchmarks/remote_cache.py) take a `CacheServer` from `STARTERS`
by protocol name, so one test runs against every protocol. `oci` is a CNCF
distribution registry of the test's own (tests/integration/registries.py); the
Remote Execution API (`grpc`) and HTTP cache (`http`) servers join `STARTERS` from
their own starters once they exist, each returning a `CacheServer` with:

- `url`: the `--cache=` URL of an empty cache;
- `entries()`: the action keys the server holds (to show nothing was written);
- `stop()`: stop the server for good (a server gone mid-build);
- `slow(seconds)`: a context giving the URL of the same cache whose every answer
  comes after `seconds` (None when the protocol has no such proxy yet);
- `read_only()`: a context giving the URL of the same cache on a server that
  takes no writes, and the environment a client needs there (None: not yet).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from shipyard.oci.remote.registry import NotFound, Registry
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

__all__ = ["STARTERS", "CacheServer", "Starter", "cache_server", "missing", "registry_cache"]


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


def _registry_missing() -> str | None:
    if registry_binary() is None:
        return "docker-registry is not installed (apt-get install docker-registry)"
    return None


# Protocol -> (starter, why it cannot run here or None). After the merge of the
# protocol clients: "grpc" (BuildGrid) and "http" (nginx WebDAV) from their starters.
STARTERS: dict[str, tuple[Starter, Callable[[], str | None]]] = {
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
