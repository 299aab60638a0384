"""A fault-injecting HTTP proxy on 127.0.0.1, in front of one loopback upstream.

`FaultProxy(upstream)` listens on a free 127.0.0.1 port and forwards each request
to `upstream` (a registry or a package index, plain HTTP on loopback only). A
seeded RNG picks a `rate` share of the requests and spoils each with one fault
kind, drawn from `kinds`:

- `reset-request`: half of the request body is read, then the connection is reset
  (the upstream never sees the request);
- `reset-response`: the request is forwarded, then the answer is cut off half-way
  through its body by a reset;
- `status-500`, `status-502`, `status-503`: answered by the proxy, not forwarded;
- `status-429`: answered with `Retry-After: <retry_after>`, not forwarded;
- `stall`: the request is forwarded, then nothing comes back for `stall_seconds`
  (set it past the client's timeout) and the connection closes;
- `truncate`: the request is forwarded, the answer declares its full
  Content-Length but only half the body is sent before the connection closes
  (never drawn for HEAD, whose body a client does not read).

A TLS ClientHello (a client probing whether the host speaks TLS) is closed at once.

`force(status, ...)` makes the proxy answer matching requests itself, for tests of
answers that must fail at once (401, 403, 404, 400). Absolute URLs naming the
upstream in Location, Content-Location and Link headers and in HTML bodies are
rewritten to the proxy, so a client keeps going through it; the upstream sees its
own host in `Host`, so it writes such URLs. `injected` counts faults by kind and
`requests` every request, `exchanges` lists them in order.
"""

from __future__ import annotations

import random
import socket
import struct
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

__all__ = ["FAULT_KINDS", "Exchange", "FaultProxy", "Forced", "running_proxy"]

FAULT_KINDS = (
    "reset-request",
    "reset-response",
    "status-500",
    "status-502",
    "status-503",
    "status-429",
    "stall",
    "truncate",
)
_BODY_FAULTS = frozenset({"truncate"})  # meaningless for HEAD: its body is never read
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_REWRITTEN_HEADERS = frozenset({"location", "content-location", "link"})
_ERROR_BODY = b'{"errors":[{"code":"UNAVAILABLE","message":"injected by faultproxy"}]}'

Match = Callable[[str, str], bool]
"""(method, path with query) -> whether a rule applies to the request."""


@dataclass(frozen=True)
class Exchange:
    """One request the proxy received: what was asked and which fault or forced status."""

    method: str
    path: str
    fault: str | None


@dataclass
class Forced:
    """An answer the proxy gives itself to matching requests, `times` times (None: always)."""

    status: int
    body: bytes
    headers: dict[str, str]
    match: Match
    times: int | None


def _loopback_upstream(upstream: str) -> tuple[str, int]:
    parts = urlsplit(upstream if "://" in upstream else f"http://{upstream}")
    if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost"):
        raise ValueError(f"upstream {upstream!r}: only plain HTTP on 127.0.0.1 is proxied")
    return parts.hostname, parts.port or 80


class FaultProxy:
    """The proxy; start it with `start()` or `running_proxy(...)`, stop it with `close()`."""

    def __init__(
        self,
        upstream: str,
        *,
        rate: float = 0.25,
        seed: int = 0,
        kinds: tuple[str, ...] = FAULT_KINDS,
        stall_seconds: float = 3.0,
        retry_after: int = 1,
    ) -> None:
        unknown = set(kinds) - set(FAULT_KINDS)
        if unknown or not kinds:
            raise ValueError(f"fault kinds {sorted(unknown)} unknown; known: {FAULT_KINDS}")
        self.upstream = _loopback_upstream(upstream)
        self.rate = rate
        self.kinds = kinds
        self.stall_seconds = stall_seconds
        self.retry_after = retry_after
        self.injected: Counter[str] = Counter()
        self.requests = 0
        self.rewritten = 0
        self.exchanges: list[Exchange] = []
        self._rng = random.Random(seed)
        self._forced: list[Forced] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self.errors: list[str] = []  # exceptions in handlers (a client gone, upstream down)
        self._server = _Server(("127.0.0.1", 0), _handler(self))
        self._server.proxy = self
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,))
        self._thread.daemon = True

    @property
    def host(self) -> str:
        """`127.0.0.1:PORT`, where clients connect."""
        return f"127.0.0.1:{self._server.server_address[1]}"

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT/`."""
        return f"http://{self.host}/"

    @property
    def upstream_base(self) -> str:
        """`http://HOST:PORT` of the upstream, as it names itself in absolute URLs."""
        return f"http://{self.upstream[0]}:{self.upstream[1]}"

    def start(self) -> FaultProxy:
        """Serve on a background thread."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; stalled exchanges end at once."""
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def force(
        self,
        status: int,
        *,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        match: Match = lambda _method, _path: True,
        times: int | None = None,
    ) -> None:
        """Answer matching requests with `status` (before any random fault), `times` times."""
        with self._lock:
            self._forced.append(Forced(status, body, dict(headers or {}), match, times))

    def clear(self) -> None:
        """Forget every forced answer."""
        with self._lock:
            self._forced.clear()

    def count(self, method: str, path_part: str = "") -> int:
        """How many requests with `method` had `path_part` in their path."""
        with self._lock:
            return sum(1 for e in self.exchanges if e.method == method and path_part in e.path)

    @property
    def faults(self) -> int:
        """How many faults were injected in all."""
        return sum(self.injected.values())

    def decide(self, method: str, path: str) -> Forced | str | None:
        """A forced answer, a fault kind, or None, for a request just received (recorded)."""
        with self._lock:
            decision = self._choose(method, path)
            self.requests += 1
            if isinstance(decision, Forced):
                self.injected[f"forced-{decision.status}"] += 1
                self.exchanges.append(Exchange(method, path, f"forced-{decision.status}"))
            else:
                self.injected.update([decision] if decision else [])
                self.exchanges.append(Exchange(method, path, decision))
            return decision

    def _choose(self, method: str, path: str) -> Forced | str | None:
        for forced in self._forced:
            if forced.match(method, path) and forced.times != 0:
                if forced.times is not None:
                    forced.times -= 1
                return forced
        if self.rate <= 0 or self._rng.random() >= self.rate:
            return None
        kinds = [k for k in self.kinds if method != "HEAD" or k not in _BODY_FAULTS]
        return self._rng.choice(kinds or ["reset-response"])

    def rewrite(self, text: str) -> str:
        """`text` with the upstream's base URL replaced by the proxy's."""
        if self.upstream_base not in text:
            return text
        with self._lock:
            self.rewritten += 1
        return text.replace(self.upstream_base, f"http://{self.host}")

    def wait_stall(self) -> None:
        """Hold a stalled exchange until `stall_seconds` pass or the proxy closes."""
        self._closing.wait(self.stall_seconds)


@contextmanager
def running_proxy(upstream: str, **options: Any) -> Iterator[FaultProxy]:
    """A started FaultProxy in front of `upstream` until the block ends."""
    proxy = FaultProxy(upstream, **options)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()


class _Server(ThreadingHTTPServer):
    """Records a handler's exception instead of printing it past the test's capture."""

    proxy: FaultProxy

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        self.proxy.errors.append(f"{type(error).__name__}: {error}")


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0) instead of an orderly FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    except OSError:
        pass


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: tests read the counters."""

        def handle(self) -> None:
            # A client probing for TLS sends a ClientHello, which has no line end
            # for the request parser to wait for: close at once so it falls back.
            try:
                first = self.connection.recv(1, socket.MSG_PEEK)
            except OSError:
                return
            if first in (b"", b"\x16"):
                return
            super().handle()

        def _read_body(self, limit: int | None = None) -> bytes:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                return self._read_chunked(limit)
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length if limit is None else min(limit, length))

        def _read_chunked(self, limit: int | None) -> bytes:
            data = bytearray()
            while limit is None or len(data) < limit:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
            return bytes(data)

        def _send(
            self,
            status: int,
            reason: str,
            headers: list[tuple[str, str]],
            body: bytes,
            *,
            length: int | None = None,
            close: bool = False,
        ) -> None:
            lines = [f"HTTP/1.1 {status} {reason}"]
            lines += [f"{k}: {v}" for k, v in headers]
            if length is not None:
                lines.append(f"Content-Length: {length}")
            if close:
                lines.append("Connection: close")
                self.close_connection = True
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
            self.wfile.write(head + body)

        def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
            host, port = proxy.upstream
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            headers["Host"] = f"{host}:{port}"
            if body or self.command in ("POST", "PUT", "PATCH"):
                headers["Content-Length"] = str(len(body))
            conn = HTTPConnection(host, port, timeout=60)
            try:
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read() if self.command != "HEAD" else b""
                kept: list[tuple[str, str]] = []
                for key, value in resp.getheaders():
                    lower = key.lower()
                    if lower in _HOP_BY_HOP and not (
                        self.command == "HEAD" and lower == "content-length"
                    ):
                        continue
                    kept.append(
                        (key, proxy.rewrite(value) if lower in _REWRITTEN_HEADERS else value)
                    )
                if "text/html" in (resp.getheader("Content-Type") or ""):
                    rewritten = proxy.rewrite(data.decode("utf-8", "surrogateescape"))
                    data = rewritten.encode("utf-8", "surrogateescape")
                return resp.status, resp.reason, kept, data
            finally:
                conn.close()

        def _exchange(self) -> None:
            self._answer(proxy.decide(self.command, self.path))

        def _answer(self, decision: Forced | str | None) -> None:
            if decision == "reset-request":
                declared = int(self.headers.get("Content-Length") or 0)
                self._read_body(limit=declared // 2)
                _reset(self.connection)
                self.close_connection = True
                return
            body = self._read_body()
            if isinstance(decision, Forced):
                headers = list(decision.headers.items())
                if decision.body:
                    headers.append(("Content-Type", "application/json"))
                payload = decision.body if self.command != "HEAD" else b""
                self._send(decision.status, "Forced", headers, payload, length=len(decision.body))
                return
            if decision is not None and decision.startswith("status-"):
                injected = int(decision.removeprefix("status-"))
                extra = [("Content-Type", "application/json")]
                if injected == 429:
                    extra.append(("Retry-After", str(proxy.retry_after)))
                payload = _ERROR_BODY if self.command != "HEAD" else b""
                self._send(injected, "Injected", extra, payload, length=len(_ERROR_BODY))
                return
            status, reason, headers, data = self._forward(body)
            is_head = self.command == "HEAD"
            whole = None if is_head else len(data)
            if decision == "reset-response":
                if data and not is_head:
                    self._send(status, reason, headers, data[: len(data) // 2], length=whole)
                    threading.Event().wait(0.05)  # let the client read into the body
                _reset(self.connection)
                self.close_connection = True
                return
            if decision == "stall":
                proxy.wait_stall()
                self.close_connection = True
                return
            if decision == "truncate":
                promised = len(data) if data else 64
                self._send(status, reason, headers, data[: len(data) // 2], length=promised)
                self.close_connection = True
                return
            self._send(status, reason, headers, data, length=whole)

        do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _exchange

    return Handler
