"""A TCP-level stall on 127.0.0.1: a server whose answers come late, or never.

`faultproxy.FaultProxy` spoils HTTP exchanges; a gRPC channel speaks HTTP/2, which
it cannot forward, so a slow gRPC cache is made one level down. `running_stall`
listens on a free 127.0.0.1 port and accepts every connection: what a client sends
goes on to `upstream` at once, what the upstream answers is held back until
`seconds` have passed since the connection opened. Without an upstream nothing is
ever answered: a server that accepts connections and never replies (a hung
process, a load balancer with nothing behind it), which no real server does on
demand. Every socket closes with the block.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

__all__ = ["Stall", "running_stall"]


@dataclass
class Stall:
    """The listening address (`host`, as HOST:PORT) and how many connections came."""

    host: str
    connections: int = 0
    _closing: threading.Event = field(default_factory=threading.Event)
    _sockets: list[socket.socket] = field(default_factory=list)


@contextmanager
def running_stall(upstream: str | None = None, seconds: float = 3600.0) -> Iterator[Stall]:
    """A stall in front of `upstream` (HOST:PORT on 127.0.0.1; None: no upstream, no
    answer ever) holding each answer `seconds`, until the block ends."""
    if upstream is not None and not upstream.startswith("127.0.0.1:"):
        raise ValueError(f"upstream {upstream!r}: only 127.0.0.1 is proxied")
    listener = socket.create_server(("127.0.0.1", 0))
    stall = Stall(f"127.0.0.1:{listener.getsockname()[1]}", _sockets=[listener])

    def serve() -> None:
        while not stall._closing.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            stall.connections += 1
            stall._sockets.append(client)
            threading.Thread(
                target=_connection, args=(stall, client, upstream, seconds), daemon=True
            ).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield stall
    finally:
        stall._closing.set()
        for sock in stall._sockets:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def _connection(stall: Stall, client: socket.socket, upstream: str | None, seconds: float) -> None:
    opened = time.monotonic()
    if upstream is None:
        _pump(client, None, stall)  # read and drop until the client or the block closes
        return
    host, _, port = upstream.rpartition(":")
    try:
        server = socket.create_connection((host, int(port)), timeout=10)
    except OSError:
        client.close()
        return
    server.settimeout(None)
    stall._sockets.append(server)
    threading.Thread(target=_pump, args=(client, server, stall), daemon=True).start()
    if stall._closing.wait(max(0.0, opened + seconds - time.monotonic())):
        return
    _pump(server, client, stall)


def _pump(source: socket.socket, target: socket.socket | None, stall: Stall) -> None:
    """Copy `source` to `target` (or nowhere) until either closes."""
    with suppress(OSError):
        while not stall._closing.is_set():
            data = source.recv(65536)
            if not data:
                break
            if target is not None:
                target.sendall(data)
    with suppress(OSError):
        if target is not None:
            target.shutdown(socket.SHUT_WR)
