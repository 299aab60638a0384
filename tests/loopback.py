"""One scripted HTTP server on a loopback address, shared by the tests' fake registries.

The fakes differ in what they answer (scripted routes, a hostile front to the real
registry, a host that only records); how a request is read, an answer written and
the server started and stopped is the same, and lives here.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

__all__ = ["Request", "read_request", "send_reply", "serving"]


@dataclass(frozen=True)
class Request:
    """One request a fake server received (header names in lower case)."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


def read_request(handler: BaseHTTPRequestHandler) -> Request:
    """The request `handler` is serving, its body read whole."""
    length = int(handler.headers.get("Content-Length") or 0)
    body = handler.rfile.read(length) if length else b""
    parts = urlsplit(handler.path)
    headers = {k.lower(): v for k, v in handler.headers.items()}
    return Request(handler.command, parts.path, parse_qs(parts.query), headers, body)


def send_reply(
    handler: BaseHTTPRequestHandler,
    status: int,
    headers: dict[str, str],
    body: bytes,
    *,
    cut: bool = False,
) -> None:
    """Answer with `status`, `headers` and `body` (half of it and a close when `cut`)."""
    handler.send_response(status)
    for key, value in headers.items():
        handler.send_header(key, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body[: len(body) // 2] if cut else body)
    if cut:
        handler.close_connection = True


@contextmanager
def serving(
    address: str,
    respond: Callable[[BaseHTTPRequestHandler], None],
    server_class: type[ThreadingHTTPServer] = ThreadingHTTPServer,
    tls: ssl.SSLContext | None = None,
) -> Iterator[int]:
    """Serve every method with `respond(handler)` on `address` (HTTPS with `tls`); yield
    the port."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the tests assert on what was seen."""

        def handle_any(self) -> None:
            respond(self)

        do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = handle_any

    server = server_class((address, 0), Handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
