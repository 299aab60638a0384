"""mesh-discovery's HTTP API, served in-process on 127.0.0.1 with a free port."""

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from meshdiscovery import DiscoveryServer, Service
from meshdiscovery.server import main

# Loopback only, and never through an HTTP(S)_PROXY from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture
def server() -> Iterator[DiscoveryServer]:
    server = DiscoveryServer("127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join(10)
        server.server_close()


def _call(server: DiscoveryServer, method: str, path: str, body: bytes | None = None) -> Any:
    """The status and decoded JSON body of one request, error statuses included."""
    request = urllib.request.Request(server.url + path, data=body, method=method)
    try:
        with _OPENER.open(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def test_url_reports_the_bound_port(server: DiscoveryServer) -> None:
    assert server.url.startswith("http://127.0.0.1:")
    assert not server.url.endswith(":0")
    assert _call(server, "GET", "/healthz") == (200, {"status": "ok"})


def test_put_get_list_and_delete(server: DiscoveryServer) -> None:
    body = json.dumps({"address": "10.0.0.7:8080"}).encode()
    assert _call(server, "PUT", "/v1/services/web", body) == (
        201,
        {"name": "web", "address": "10.0.0.7:8080"},
    )
    assert _call(server, "PUT", "/v1/services/web", body)[0] == 200
    assert server.registry.services() == [Service("web", "10.0.0.7:8080")]
    assert _call(server, "GET", "/v1/services") == (
        200,
        [{"name": "web", "address": "10.0.0.7:8080"}],
    )
    assert _call(server, "DELETE", "/v1/services/web") == (200, {"deregistered": "web"})
    status, payload = _call(server, "GET", "/v1/services/web")
    assert status == 404
    assert "not registered" in payload["error"]


@pytest.mark.parametrize(
    ("path", "body", "status", "error"),
    [
        ("/v1/services/Bad_Name", b'{"address": "10.0.0.7:80"}', 400, "invalid service name"),
        ("/v1/services/web", b"{not json", 400, "invalid JSON body"),
        ("/v1/services/web", b'["10.0.0.7:80"]', 400, "body must be a JSON object"),
        ("/v1/services/web", b"{}", 400, "'address' must be a non-empty string"),
        ("/elsewhere/web", b'{"address": "10.0.0.7:80"}', 404, "no route for /elsewhere/web"),
    ],
)
def test_bad_requests_get_a_json_error(
    server: DiscoveryServer, path: str, body: bytes, status: int, error: str
) -> None:
    got_status, payload = _call(server, "PUT", path, body)
    assert got_status == status
    assert error in payload["error"]
    assert server.registry.services() == []


def test_main_refuses_a_bad_port(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--port", "70000"])
    assert exit_info.value.code == 2
    assert "port must be an integer 0-65535" in capsys.readouterr().err
