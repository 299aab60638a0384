"""mesh-discovery over HTTP, against the server `shipyard test --stage integration` starts.

The stage runs ``mesh-discovery --port <port>`` on 127.0.0.1 and passes the port in
DISCOVERY_PORT; without it these tests skip.
"""

import json
import os
import urllib.request
import uuid

import pytest
from meshapi import DiscoveryClient, DiscoveryRequestError, Service


@pytest.fixture
def base_url() -> str:
    port = os.environ.get("DISCOVERY_PORT")
    if not port:
        pytest.skip(
            "DISCOVERY_PORT is not set: the mesh-discovery server is started by "
            "`shipyard test --stage integration`"
        )
    return f"http://127.0.0.1:{int(port)}"


def _unique_name() -> str:
    """A name no other run has registered on the (long-lived) server."""
    return f"it-{uuid.uuid4().hex[:12]}"


@pytest.mark.integration
def test_the_server_is_healthy(base_url: str) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{base_url}/healthz", timeout=10) as response:
        assert response.status == 200
        assert json.loads(response.read()) == {"status": "ok"}


@pytest.mark.integration
def test_register_list_get_and_deregister(base_url: str) -> None:
    client = DiscoveryClient(base_url, timeout=10)
    name = _unique_name()
    assert client.register(name, "10.0.0.7:8080") == Service(name, "10.0.0.7:8080")
    try:
        assert client.register(name, "10.0.0.8:8080") == Service(name, "10.0.0.8:8080")
        assert Service(name, "10.0.0.8:8080") in client.services()
        assert client.get(name) == Service(name, "10.0.0.8:8080")
    finally:
        client.deregister(name)
    with pytest.raises(DiscoveryRequestError) as missing:
        client.get(name)
    assert missing.value.status == 404


@pytest.mark.integration
@pytest.mark.parametrize(
    ("name", "address", "error"),
    [
        ("Not_A_Label", "10.0.0.7:8080", "invalid service name"),
        ("web", "10.0.0.7 8080", "invalid address"),
    ],
)
def test_invalid_records_are_refused_with_400(
    base_url: str, name: str, address: str, error: str
) -> None:
    client = DiscoveryClient(base_url, timeout=10)
    with pytest.raises(DiscoveryRequestError, match=error) as refused:
        client.register(name, address)
    assert refused.value.status == 400
    assert Service(name, address) not in client.services()
