"""A tiny in-process HTTP server with scripted answers, for faults a real registry cannot
produce on demand (oci/remote/test_registry_*.py, _http/test_transport.py): 429 with
Retry-After, 503 then success, a reset connection, an answer cut short, a token
endpoint. Everything else is tested against real registries in
tests/integration/test_registry.py and, through a faulty proxy, test_faults*.py.
"""

from __future__ import annotations

import json
import random
import socket
import struct
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from shipyard._http.retry import RetryPolicy
from shipyard.oci.remote.registry import (
    Registry,
)
from tests.loopback import Request, read_request, send_reply, serving

Reply = tuple[int, dict[str, str], bytes]

RESET = "reset"  # close the connection with a TCP reset instead of answering

CUT = "cut"  # answer with the next reply's headers but half its body, then close

DIGEST = "sha256:" + "a" * 64

SECRET = "s3cret-token-pass"


Seen = Request  # one request the fake server received

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


def _respond(fake: FakeRegistry) -> Callable[[BaseHTTPRequestHandler], None]:
    def respond(handler: BaseHTTPRequestHandler) -> None:
        seen = read_request(handler)
        reply = fake.answer(seen)
        cut = reply == CUT
        if cut:
            reply = fake.answer(seen)  # the reply to cut short
            fake.seen.pop()
        if isinstance(reply, str):
            handler.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            handler.connection.close()
            handler.close_connection = True
            return
        send_reply(handler, *reply, cut=cut)

    return respond


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """Quiet: a client that timed out and left is part of the tests."""


@pytest.fixture
def fake() -> Iterator[FakeRegistry]:
    registry = FakeRegistry()
    with serving("127.0.0.1", _respond(registry), _QuietServer) as port:
        registry.host = f"127.0.0.1:{port}"
        yield registry


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
