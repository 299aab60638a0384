"""Brief until the server first answers, patient after: the HTTP cache and the registry
through `Patience`, the gRPC client through its capabilities' budget. A server that
accepts connections and never answers is a listening socket here (no real server
does that on demand); one that answers late is a real HTTP server that sleeps."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.engine.cache.endpoint import Connection, RemoteUnavailable, parse_endpoint
from shipyard.engine.cache.http import open_http_cache
from shipyard.engine.cache.patience import first_contact, per_call
from shipyard.engine.cache.reapi import open_grpc_cache
from shipyard.engine.cache.remote import open_registry_cache
from tests.unit.engine.cache._serving import Handler, serving


@pytest.fixture
def silent() -> Iterator[str]:
    """HOST:PORT of a socket that accepts connections (the kernel's backlog) and
    never answers."""
    with socket.create_server(("127.0.0.1", 0), backlog=64) as sock:
        yield f"127.0.0.1:{sock.getsockname()[1]}"


PATIENT = Connection(timeout=30.0, retries=2, connect_timeout=1.0)


def test_the_first_contact_is_bounded_by_the_connect_timeout_retries_included() -> None:
    (connect, read), retry = first_contact(PATIENT)
    assert (connect, read) == (1.0, 1.0) and retry.deadline == 1.0 and retry.quiet
    (connect, read), retry = per_call(PATIENT)
    assert (connect, read) == (1.0, 30.0) and retry.attempts == 3 and retry.quiet


@pytest.mark.parametrize("scheme", ["http", "oci", "grpc"])
def test_a_server_that_never_answers_costs_the_connect_timeout_not_three_timeouts(
    silent: str, scheme: str, tmp_path: Path
) -> None:
    endpoint = parse_endpoint(f"{scheme}://{silent}/cache")
    if scheme == "http":
        cache: object = open_http_cache(endpoint, PATIENT)
    elif scheme == "grpc":
        cache = open_grpc_cache(endpoint, PATIENT)
    else:
        cache = open_registry_cache(endpoint, PATIENT, {"DOCKER_CONFIG": "/nonexistent"})
    started = time.monotonic()
    with pytest.raises(RemoteUnavailable, match="timed out"):
        cache.restore("key", tmp_path)  # type: ignore[attr-defined]
    # 1 s each; a registry probes for TLS first (1 s more): never 3 x 30 s.
    assert time.monotonic() - started < 4
    if scheme == "grpc":  # the failure is remembered: no second wait for it
        started = time.monotonic()
        with pytest.raises(RemoteUnavailable, match="timed out"):
            cache.restore("other", tmp_path)  # type: ignore[attr-defined]
        assert time.monotonic() - started < 0.5


def test_once_the_server_answered_a_call_may_take_the_whole_timeout(tmp_path: Path) -> None:
    """The first GET is answered at once (a miss); the next one after 1.5 s, longer
    than the connect time-out (1 s) and shorter than the per-call one (30 s)."""
    answered: list[str] = []

    class Late(Handler):
        def do_GET(self) -> None:
            if answered:
                time.sleep(1.5)
            answered.append(self.path)
            self.answer(404)

    with serving(Late) as url:
        cache = open_http_cache(parse_endpoint(url), PATIENT)
        assert cache.restore("first", tmp_path) is None
        assert cache.restore("second", tmp_path) is None, "waited past the connect time-out"
        assert len(answered) == 2 and cache.stats.calls == 2
