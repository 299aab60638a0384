"""The HTTP cache client's own parts (the real server, nginx WebDAV:
tests/integration/test_remote_cache_protocols.py)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.engine.cache.endpoint import Connection, RemoteUnavailable, parse_endpoint
from shipyard.engine.cache.http import HttpCache, open_http_cache
from shipyard.engine.cache.reapi.results import action_for
from shipyard.errors import UsageError


@pytest.fixture
def busy() -> Iterator[tuple[str, list[str]]]:
    """A server on 127.0.0.1 that answers every request 503, and the paths asked."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/cache", asked
    finally:
        server.shutdown()
        server.server_close()


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
