"""The gRPC client's own parts: batching, metadata, channels, and a server that is not there
(the real server: tests/integration/test_remote_cache_protocols.py)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from shipyard.engine.cache.endpoint import Connection, RemoteUnavailable, parse_endpoint
from shipyard.engine.cache.reapi import open_grpc_cache
from shipyard.engine.cache.reapi.client import GrpcCache, _batches, _metadata
from shipyard.engine.cache.reapi.stubs import re_pb2
from shipyard.errors import UsageError


def _digest(size: int) -> re_pb2.Digest:
    return re_pb2.Digest(hash=f"{size:064x}", size_bytes=size)


def test_batches_stay_under_the_limit_and_keep_the_order() -> None:
    blobs = [(_digest(size), size) for size in (40, 50, 10, 100, 1)]
    groups = [[tag for _, tag in batch] for batch in _batches(blobs, 100)]
    assert groups == [[40, 50, 10], [100], [1]]


def test_headers_token_and_basic_credentials_become_call_metadata() -> None:
    connection = Connection(headers=(("x-buildbuddy-api-key", "k"),), basic=("ci", "pw"))
    assert _metadata(connection) == (
        ("x-buildbuddy-api-key", "k"),
        ("authorization", "Basic Y2k6cHc="),
    )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_server_that_is_not_there_is_remote_unavailable_after_the_retries(
    tmp_path: Path,
) -> None:
    endpoint = parse_endpoint(f"grpc://127.0.0.1:{_closed_port()}/main")
    cache = open_grpc_cache(endpoint, Connection(timeout=2.0, retries=2))
    assert cache.stats.calls == 0  # opening the client sends nothing
    started = time.monotonic()
    with pytest.raises(RemoteUnavailable, match=r"GetCapabilities: UNAVAILABLE .* 3 attempts"):
        cache.restore("key", tmp_path)
    assert time.monotonic() - started < 10 and cache.stats.calls == 3
    assert not (tmp_path / "dist").exists() or not any((tmp_path / "dist").iterdir())


def test_a_client_certificate_without_its_key_is_a_usage_error(tmp_path: Path) -> None:
    cert = tmp_path / "client.pem"
    cert.write_text("not used")
    endpoint = parse_endpoint("grpcs://127.0.0.1:1/main")
    with pytest.raises(UsageError, match="SHIPYARD_CACHE_KEY"):
        GrpcCache(endpoint, Connection(cert_file=cert))
