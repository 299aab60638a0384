"""A real HTTP server on 127.0.0.1 for the cache clients' unit tests."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Handler", "serving"]


class Handler(http.server.BaseHTTPRequestHandler):
    """A quiet handler with `answer(status)`: an empty body."""

    def answer(self, status: int) -> None:
        """Send `status` with no body."""
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@contextmanager
def serving(handler: type[Handler]) -> Iterator[str]:
    """`http://127.0.0.1:PORT/cache` served by `handler` until the block ends."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/cache"
    finally:
        server.shutdown()
        server.server_close()
