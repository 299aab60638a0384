"""The HTTP cache client's own parts (the real server, nginx WebDAV:
tests/integration/test_remote_cache_protocols.py)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.artifacts import Artifact
from shipyard.engine.cache.endpoint import Connection, RemoteUnavailable, parse_endpoint
from shipyard.engine.cache.http import HttpCache, open_http_cache
from shipyard.engine.cache.reapi.results import action_for
from shipyard.errors import UsageError
from tests.unit.engine.cache._serving import Handler, serving


@pytest.fixture
def busy() -> Iterator[tuple[str, list[str]]]:
    """A server on 127.0.0.1 that answers every request 503, and the paths asked."""
    asked: list[str] = []

    class Busy(Handler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.answer(503)

    with serving(Busy) as url:
        yield url, asked


def test_a_busy_server_is_retried_then_remote_unavailable(busy: tuple[str, list[str]]) -> None:
    url, asked = busy
    cache = open_http_cache(parse_endpoint(url), Connection(timeout=2.0, retries=2))
    with pytest.raises(RemoteUnavailable, match="503"):
        cache.get_result(action_for("key").digest)
    digest = action_for("key").digest.hash
    assert asked == [f"/cache/ac/{digest}"] * 3 and cache.stats.calls == 3


def test_a_client_certificate_without_its_key_is_a_usage_error(tmp_path: Path) -> None:
    cert = tmp_path / "client.pem"
    cert.write_text("not used")
    with pytest.raises(UsageError, match="SHIPYARD_CACHE_KEY"):
        HttpCache(parse_endpoint("https://127.0.0.1:1/cache"), Connection(cert_file=cert))


def test_retries_are_quiet_the_caches_one_warning_says_it(busy: tuple[str, list[str]]) -> None:
    # A handler on the retry logger itself: other tests' logging setup does not matter.
    seen: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = seen.append  # type: ignore[method-assign,assignment]
    retry_log = logging.getLogger("shipyard._http.retry")
    retry_log.addHandler(handler)
    level = retry_log.level
    retry_log.setLevel(logging.DEBUG)  # the CLI's tests leave "shipyard" at WARNING
    try:
        url, _ = busy
        cache = open_http_cache(parse_endpoint(url), Connection(timeout=2.0, retries=2))
        with pytest.raises(RemoteUnavailable):
            cache.get_result(action_for("key").digest)
    finally:
        retry_log.removeHandler(handler)
        retry_log.setLevel(level)
    retries = [r for r in seen if "retry" in r.getMessage()]
    assert len(retries) == 2 and all(r.levelno == logging.DEBUG for r in retries)


@pytest.mark.parametrize("status", [401, 403, 405])
def test_a_refused_put_makes_the_cache_read_only_not_unavailable(
    status: int, tmp_path: Path
) -> None:
    """nginx serving GET/HEAD only answers a PUT 403 (405 without WebDAV; 401 for
    credentials that may only read): nothing is stored, nothing more is sent up."""
    puts: list[str] = []

    class ReadsOnly(Handler):
        def do_HEAD(self) -> None:
            self.answer(404)

        def do_PUT(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            puts.append(self.path)
            self.answer(status)

    with serving(ReadsOnly) as url:
        cache = open_http_cache(parse_endpoint(url), Connection(timeout=2.0, retries=2))
        path = tmp_path / "dist" / "app.pyz"
        path.parent.mkdir()
        path.write_bytes(b"app")
        outputs = (Artifact("zipapp", "app", "any", path, hashlib.sha256(b"app").hexdigest(), 3),)
        assert cache.writable
        cache.store("key", outputs, tmp_path)
        assert not cache.writable and cache.stats.stored == 0
        assert len(puts) == 1, "the first refusal stops the store, and is not retried"
        cache.store("key", outputs, tmp_path)
        assert len(puts) == 1, "nothing more is sent up"
