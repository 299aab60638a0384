"""The echo client: send one message and collect what comes back."""

from __future__ import annotations

import socket

__all__ = ["EchoError", "send"]


class EchoError(Exception):
    """The echo server could not be reached or the exchange broke off."""


def send(message: str, host: str, port: int, timeout: float = 5.0) -> str:
    """Send ``message`` (UTF-8) to an echo server and return its complete reply.

    The whole message is sent before the reply is read, so it is meant for messages that
    fit in the sockets' buffers (hundreds of kilobytes on loopback), not for streaming.
    """
    chunks: list[bytes] = []
    try:
        with socket.create_connection((host, port), timeout=timeout) as connection:
            connection.sendall(message.encode())
            # Half-closing marks the end of the message, so the server's EOF marks the reply's.
            connection.shutdown(socket.SHUT_WR)
            while chunk := connection.recv(64 * 1024):
                chunks.append(chunk)
    except OSError as exc:
        raise EchoError(f"echo exchange with {host}:{port} failed: {exc}") from exc
    return b"".join(chunks).decode(errors="replace")
