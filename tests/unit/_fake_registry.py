"""A tiny in-process HTTP server with scripted answers, for faults a real registry cannot
produce on demand (test_registry_*.py, test_http_client.py): 429 with Retry-After, 503
then success, a reset connection, an answer cut short, a token endpoint. Everything
else is tested against real registries in tests/integration/test_registry.py and,
through a faulty proxy, test_faults*.py.
"""

from __future__ import annotations

import json
import random
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from shipyard._http.retry import RetryPolicy
from shipyard.oci.remote.registry import (
    Registry,
)

Reply = tuple[int, dict[str, str], bytes]

RESET = "reset"  # close the connection with a TCP reset instead of answering

CUT = "cut"  # answer with the next reply's headers but half its body, then close

DIGEST = "sha256:" + "a" * 64

SECRET = "s3cret-token-pass"


@dataclass(frozen=True)
class Seen:
    """One request the fake server received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


Route = Reply | str | Callable[[Seen], Reply]


class FakeRegistry:
    """Scripted answers per (method, path); the last answer of a route repeats."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[Route]] = {}
        self.seen: list[Seen] = []
        self.host = ""

    def route(self, method: str, path: str, *replies: Route) -> None:
        self.routes[(method, path)] = list(replies)

    def count(self, method: str, path: str) -> int:
        return sum(1 for s in self.seen if (s.method, s.path) == (method, path))

    def answer(self, seen: Seen) -> Reply | str:
        self.seen.append(seen)
        queue = self.routes.get((seen.method, seen.path))
        if not queue:
            return 404, {}, b'{"errors":[{"code":"UNKNOWN_TO_FAKE","message":"no route"}]}'
        item = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(item, str):
            return item
        return item(seen) if callable(item) else item


def _handler(fake: FakeRegistry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the tests assert on what was seen."""

        def handle_any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            headers = {k.lower(): v for k, v in self.headers.items()}
            seen = Seen(self.command, parts.path, parse_qs(parts.query), headers, body)
            reply = fake.answer(seen)
            cut = reply == CUT
            if cut:
                reply = fake.answer(seen)  # the reply to cut short
                fake.seen.pop()
            if isinstance(reply, str):
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.connection.close()
                self.close_connection = True
                return
            status, extra, payload = reply
            self.send_response(status)
            for key, value in extra.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload[: len(payload) // 2] if cut else payload)
            if cut:
                self.close_connection = True

        do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = handle_any

    return Handler


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """Quiet: a client that timed out and left is part of the tests."""


@pytest.fixture
def fake() -> Iterator[FakeRegistry]:
    registry = FakeRegistry()
    server = _QuietServer(("127.0.0.1", 0), _handler(registry))
    server.daemon_threads = True
    registry.host = f"127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield registry
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def sleeps() -> list[float]:
    return []


def client(
    fake: FakeRegistry, sleeps: list[float], environ: dict[str, str] | None = None
) -> tuple[Registry, list[tuple[str, str, int | None]]]:
    """A Registry for the fake server whose retries record their pauses instead of sleeping."""
    policy = RetryPolicy(
        attempts=3, base_delay=0.5, max_delay=4.0, sleep=sleeps.append, rng=random.Random(3)
    )
    calls: list[tuple[str, str, int | None]] = []
    registry = Registry(
        f"http://{fake.host}",
        retry=policy,
        environ=environ if environ is not None else {"DOCKER_CONFIG": "/nonexistent"},
        on_request=lambda method, path, status: calls.append((method, path, status)),
        timeout=(5.0, 5.0),
    )
    return registry, calls


def errors(code: str, message: str) -> bytes:
    return json.dumps({"errors": [{"code": code, "message": message}]}).encode()
