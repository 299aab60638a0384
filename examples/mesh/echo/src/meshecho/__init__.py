"""mesh-echo: a TCP echo server and the client that checks it."""

from meshecho.client import EchoError, send
from meshecho.server import EchoServer

__all__ = ["EchoError", "EchoServer", "send"]
