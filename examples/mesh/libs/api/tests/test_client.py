"""mesh-api's DiscoveryClient, with its HTTP opener replaced: no sockets are opened."""

import io
import json
import urllib.request
from typing import Any

import pytest
from meshapi import DiscoveryClient, DiscoveryError, DiscoveryProtocolError, Service


class _FakeOpener:
    """Answers every request with ``body`` and records what was asked."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.requests: list[urllib.request.Request] = []

    def open(self, request: urllib.request.Request, timeout: float) -> io.BytesIO:
        self.requests.append(request)
        return io.BytesIO(self.body)


def _client(payload: Any) -> tuple[DiscoveryClient, _FakeOpener]:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    client = DiscoveryClient("http://127.0.0.1:15010/", timeout=1.0)
    opener = _FakeOpener(body)
    client._opener = opener
    return client, opener


def test_the_base_url_must_be_http() -> None:
    with pytest.raises(DiscoveryError, match="must start with http:// or https://"):
        DiscoveryClient("127.0.0.1:15010")
    assert DiscoveryClient("http://127.0.0.1:15010/").base_url == "http://127.0.0.1:15010"


def test_register_puts_json_and_services_gets_the_listing() -> None:
    client, opener = _client({"name": "web", "address": "10.0.0.7:80"})
    assert client.register("web", "10.0.0.7:80") == Service("web", "10.0.0.7:80")
    (request,) = opener.requests
    assert request.get_method() == "PUT"
    assert request.full_url == "http://127.0.0.1:15010/v1/services/web"
    assert request.data is not None
    assert json.loads(request.data) == {"address": "10.0.0.7:80"}

    client, opener = _client([{"name": "a", "address": "1"}, {"name": "b", "address": "2"}])
    assert client.services() == [Service("a", "1"), Service("b", "2")]
    (request,) = opener.requests
    assert (request.get_method(), request.full_url) == (
        "GET",
        "http://127.0.0.1:15010/v1/services",
    )


@pytest.mark.parametrize("payload", [b"<html>not json</html>", {"name": "a"}, {"services": []}])
def test_answers_that_are_not_discovery_are_protocol_errors(payload: Any) -> None:
    client, _ = _client(payload)
    with pytest.raises(DiscoveryProtocolError):
        client.services()
