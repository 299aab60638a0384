"""mesh-agent's probe server, served in-process on 127.0.0.1 with a free port."""

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from meshagent import HealthServer, health_report

# Loopback only, and never through an HTTP(S)_PROXY from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture
def server() -> Iterator[HealthServer]:
    server = HealthServer("127.0.0.1", 0, health_report("9.9.9", yaml_native=True))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join(10)
        server.server_close()


def _get(server: HealthServer, path: str) -> tuple[int, Any]:
    try:
        with _OPENER.open(server.url + path, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def test_healthz_serves_the_report(server: HealthServer) -> None:
    assert server.url.startswith("http://127.0.0.1:")
    assert _get(server, "/healthz") == (
        200,
        {"status": "ok", "version": "9.9.9", "yaml_native": True},
    )


def test_readyz_follows_the_ready_flag(server: HealthServer) -> None:
    assert _get(server, "/readyz") == (503, {"ready": False})
    server.ready.set()
    assert _get(server, "/readyz?verbose=1") == (200, {"ready": True})
    server.ready.clear()
    assert _get(server, "/readyz") == (503, {"ready": False})


def test_unknown_paths_are_404(server: HealthServer) -> None:
    assert _get(server, "/metrics") == (404, {"error": "no route for /metrics"})
