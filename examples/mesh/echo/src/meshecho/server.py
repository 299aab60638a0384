"""A TCP echo server: every byte a client sends comes straight back."""

from __future__ import annotations

import socketserver

__all__ = ["EchoServer"]

_CHUNK_BYTES = 64 * 1024


class _EchoHandler(socketserver.StreamRequestHandler):
    # A client that connects and goes quiet would otherwise hold its thread forever.
    timeout = 60.0

    def handle(self) -> None:
        try:
            while chunk := self.connection.recv(_CHUNK_BYTES):
                self.connection.sendall(chunk)
        except (TimeoutError, ConnectionError):
            pass  # the client went away or idled out; nothing is owed to it


class EchoServer(socketserver.ThreadingTCPServer):
    """Echoes each connection until the client closes its sending side."""

    # Restarting right after a stop must not fail on the old socket's TIME_WAIT.
    allow_reuse_address = True
    # A connection still open at shutdown must not keep the process alive.
    daemon_threads = True

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__((host, port), _EchoHandler)

    @property
    def port(self) -> int:
        """The bound port, which is the real one when constructed with port 0."""
        return int(self.socket.getsockname()[1])
