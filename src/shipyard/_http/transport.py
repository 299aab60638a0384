"""HTTP for the registry and package-index clients: TLS, plain HTTP, redirects, retries.

`Client` sends the requests of one server (a registry host, a package index) and
knows nothing of what they mean. Every URL is checked before a connection is made:
a host part two parsers read differently is refused (`urls.safe_url`, `UnsafeURL`),
and plain HTTP goes only to loopback hosts or hosts the caller allows. Redirects
are followed here, so each hop is checked the same way; credentials never follow a
hop to another origin (`urls.origin`), and a 307/308 that would send a body there
is refused. TLS is verified against the default CA bundle or a private CA
(`ca_file`): only this host skips verification when it is insecure, every other
host is verified (against its own CA when the caller knows one) unless it is one
of the `insecure_hosts`. Transient faults (no answer, a reset, a time-out, a body
cut short, 429 and 5xx) are retried by the client's `Retrier`, and each wait for an
answer is bounded (`settings.http_timeout`). Failures are typed `RemoteError`s
naming the server and the operation, never a secret.

What a server's answers mean (the registry's error bodies and 401 challenges, the
index's pages) is the caller's: the registry client subclasses `Client` in
`shipyard.oci.remote.transport`; the index client holds one.
"""

from __future__ import annotations

import ssl
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar
from urllib.parse import urljoin, urlsplit

import requests

from shipyard._http.errors import CertificateError, PlainHTTPRefused, RemoteError, UnsafeURL
from shipyard._http.retry import (
    TRANSIENT_ERRORS,
    TRANSIENT_STATUS,
    Backoff,
    Retrier,
    RetryPolicy,
    exception_chain,
    failure_reason,
    parse_retry_after,
)
from shipyard._http.settings import DEFAULT_TIMEOUT
from shipyard._http.urls import authority, is_loopback, origin, safe_url

__all__ = [
    "CertificateError",
    "Client",
    "HTTPStats",
    "PlainHTTPRefused",
    "RemoteError",
    "RequestHook",
    "failure_reason",
    "read_capped",
]

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_REDIRECTS = 10
_BODY_HEADERS = ("content-type", "content-length", "content-range")
_T = TypeVar("_T")


@dataclass
class HTTPStats:
    """What a Client sent: requests per method, and how many retries it made."""

    requests: Counter[str] = field(default_factory=Counter)
    retries: int = 0


RequestHook = Callable[[str, str, int | None], None]
"""Called after each HTTP exchange with method, URL path and status (None: no answer)."""


def _has_verify_error(exc: BaseException) -> bool:
    return any(isinstance(c, ssl.SSLCertVerificationError) for c in exception_chain(exc))


def read_capped(resp: requests.Response, limit: int) -> tuple[bytes, bool]:
    """Up to `limit` bytes of the body, and whether that was all of it."""
    chunks: list[bytes] = []
    total = 0
    for chunk in resp.iter_content(64 << 10):
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            return b"".join(chunks)[:limit], False
    return b"".join(chunks), True


class Client:
    """The requests of one server `host` (`host:port`): checked, typed, counted, retried.

    `where` names the server in errors and retry lines (default: `host`); `scheme`
    is "" while unknown (a subclass decides it in `_url`). `insecure=True` allows
    plain HTTP to `host` and skips TLS verification for `host` only; `insecure_hosts`
    may be sent plain HTTP (and unverified TLS) whoever names them, and
    `insecure_hint` says how to add one. `ca_file` is a private CA for `host`,
    `trust_hint` how to give one; every other host is verified against the default
    bundle, or the CA `_ca_file_for` finds for it. `error` is the class of the
    errors raised; `stats` counts what was sent.
    """

    def __init__(
        self,
        host: str,
        *,
        where: str | None = None,
        server: str = "the server",
        scheme: str = "",
        insecure: bool = False,
        insecure_hosts: frozenset[str] = frozenset(),
        insecure_hint: str = "allow it as insecure",
        ca_file: Path | None = None,
        trust_hint: str = "pass its PEM certificate as ca_file",
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        session: requests.Session | None = None,
        on_request: RequestHook | None = None,
        error: type[RemoteError] = RemoteError,
        stats: HTTPStats | None = None,
    ) -> None:
        self.host = host
        self.where = host if where is None else where
        self.insecure = insecure
        self.ca_file = ca_file
        self.stats = stats or HTTPStats()
        self._server = server
        self._scheme = scheme
        self._insecure_hosts = frozenset(h.lower() for h in insecure_hosts if h)
        self._insecure_hint = insecure_hint
        self._trust_hint = trust_hint
        self._verify: bool | str = str(ca_file) if ca_file else not insecure
        self._timeout = timeout
        self._retry = retry or RetryPolicy()
        self._error_type = error
        self._retrier = Retrier(
            self._retry, where=self.where, error=error, on_retry=lambda: self._count(retries=1)
        )
        self._session = session or requests.Session()
        self._session.headers["User-Agent"] = "shipyard"
        self._hook = on_request
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.host!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the pooled connections (the client may still be used; it reconnects)."""
        self._session.close()

    def set_patience(self, timeout: tuple[float, float], retry: RetryPolicy) -> None:
        """Wait `timeout` (connect, read) and retry within `retry` from the next operation
        on; one already running keeps its budget. For a caller that is patient only once
        a server has answered (a shared cache: `shipyard.engine.cache.patience`)."""
        retrier = Retrier(
            retry, where=self.where, error=self._error_type, on_retry=lambda: self._count(retries=1)
        )
        self._timeout, self._retry, self._retrier = timeout, retry, retrier

    def retrying(self, op: str, attempt: Callable[[], _T]) -> _T:
        """Call `attempt` until it returns, retrying its transient errors within the budget."""
        return self._retrier.run(op, attempt)

    def start(self) -> Backoff:
        """A fresh retry budget, for a loop that calls `pause_or_raise` itself."""
        return self._retrier.start()

    def pause_or_raise(self, op: str, exc: RemoteError, backoff: Backoff) -> None:
        """After `exc`: log and sleep before a retry, or raise when it is final."""
        self._retrier.pause_or_raise(op, exc, backoff)

    def iter_body(self, op: str, resp: requests.Response, size: int = 1 << 20) -> Iterator[bytes]:
        """The body in blocks; one that breaks off raises a transient error."""
        try:
            yield from resp.iter_content(size)
        except requests.RequestException as exc:
            detail = f"the answer broke off ({failure_reason(exc)})"
            raise self._error_type(self.where, op, detail, transient=True) from exc

    def _count(self, name: str = "", amount: int = 0, **counts: int) -> None:
        if name:
            counts[name] = amount
        with self._lock:
            for key, value in counts.items():
                setattr(self.stats, key, getattr(self.stats, key) + value)

    def checked_url(self, url: str, op: str, *, userinfo: bool = False) -> str:
        """`url` as it will be sent, or `UnsafeURL` when its host is ambiguous (`safe_url`).

        `userinfo=True` for a URL the caller wrote itself (never one a server named).
        """
        try:
            return safe_url(url, userinfo=userinfo)
        except ValueError as exc:
            detail = f"refusing a URL named by {self._server}: {exc}; nothing was sent"
            raise UnsafeURL(self.where, op, detail) from None

    def _ca_file_for(self, where: str) -> Path | None:
        """The private CA for another host `where` (`host:port`), if the caller knows one."""
        return None

    def _verify_for(self, where: str) -> bool | str:
        """TLS verification for `where`: `insecure` and `ca_file` are this host's alone."""
        if where == self.host.lower():
            return self._verify
        if where in self._insecure_hosts:
            return False
        ca_file = self._ca_file_for(where)
        return str(ca_file) if ca_file else True

    def _check_plain_http(self, url: str, op: str) -> None:
        """Refuse, before any connection, a URL that is not http(s) or is plain HTTP off loopback.

        Plain HTTP is allowed for loopback hosts, this host when it is insecure, and
        the `insecure_hosts`, whoever named the URL. The host is the one requests
        connects to (`origin`), not what another parser reads.
        """
        scheme, host, _ = origin(url)
        where = authority(url) if host else ""
        scheme = scheme or urlsplit(url).scheme.lower()
        if scheme == "https" and where:
            return
        if scheme != "http" or not where:
            raise self._error_type(self.where, op, f"{scheme or 'a'}:// URL is not http(s)")
        if is_loopback(where) or where in self._insecure_hosts:
            return
        if self.insecure and where == self.host.lower():
            return
        raise PlainHTTPRefused(
            self.where,
            op,
            f"refusing plain HTTP to {where}, named by {self._server}: credentials and "
            f"content would cross the network in clear; nothing was sent. If {where} is "
            f"trusted, {self._insecure_hint}",
        )

    def exchange(
        self,
        method: str,
        url: str,
        op: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: Callable[[], Any] | None = None,
        params: Any = None,
        auth: tuple[str, str] | None = None,
        stream: bool = False,
        timeout: tuple[float, float] | None = None,
        follow: bool = True,
    ) -> requests.Response:
        """One HTTP exchange, following redirects here so that each hop is checked.

        Every URL is checked first: an ambiguous host is refused (`UnsafeURL`; a
        `user@` only in `url` itself), then plain HTTP. A hop to another origin
        (scheme, host or port) goes without the `Authorization` header and `auth`,
        and never gets them back. 303, and 301/302 after a POST, become a GET without
        a body; 307/308 send the body again (`body` makes it afresh), but only on the
        same origin: a body is never sent to another origin (`UnsafeURL` naming both).
        The answer's `url` is the URL of the last hop. With `follow=False` a redirect
        is the answer.
        """
        sent = dict(headers or {})
        url = self.checked_url(url, op, userinfo=True)
        for _ in range(_MAX_REDIRECTS + 1):
            data = body() if body is not None else None
            resp = self._one(method, url, op, sent, data, params, auth, stream, timeout)
            location = resp.headers.get("Location")
            if resp.status_code not in _REDIRECTS or not location or not follow:
                return resp
            resp.close()
            target = self.checked_url(urljoin(resp.url or url, location), op)
            crossed = origin(target) != origin(url)
            if crossed:
                sent = {k: v for k, v in sent.items() if k.lower() != "authorization"}
                auth = None
            if (resp.status_code == 303 and method != "HEAD") or (
                resp.status_code in (301, 302) and method == "POST"
            ):
                method, body = "GET", None
                sent = {k: v for k, v in sent.items() if k.lower() not in _BODY_HEADERS}
            if crossed and body is not None:
                raise UnsafeURL(
                    self.where,
                    op,
                    f"{authority(url)} redirected the {method} (HTTP {resp.status_code}) to "
                    f"{authority(target)}, another host: its body is not sent there; nothing "
                    "more was sent",
                )
            url, params = target, None
        raise self._error_type(self.where, op, f"more than {_MAX_REDIRECTS} redirects")

    def _one(
        self,
        method: str,
        url: str,
        op: str,
        headers: Mapping[str, str],
        data: Any,
        params: Any,
        auth: tuple[str, str] | None,
        stream: bool,
        timeout: tuple[float, float] | None,
    ) -> requests.Response:
        """One request, no redirect followed, counted; connection and TLS failures typed."""
        self._check_plain_http(url, op)
        where = authority(url)
        status: int | None = None
        try:
            resp = self._session.request(
                method,
                url,
                headers=headers,
                data=data,
                params=params,
                auth=auth,
                stream=stream,
                timeout=timeout or self._timeout,
                verify=self._verify_for(where),
                allow_redirects=False,
            )
            status = resp.status_code
        except requests.exceptions.SSLError as exc:
            raise self._tls_error(op, exc, where) from exc
        except TRANSIENT_ERRORS as exc:
            why = failure_reason(exc)
            broken = (requests.ConnectionError, requests.Timeout)
            detail = f"no answer from {where} ({why})"
            if not isinstance(exc, broken):  # the body was cut short or garbled
                detail = f"the answer from {where} broke off ({why})"
            raise self._error_type(self.where, op, detail, transient=True) from exc
        except requests.RequestException as exc:
            detail = f"the request to {where} failed ({failure_reason(exc)})"
            raise self._error_type(self.where, op, detail) from exc
        finally:
            with self._lock:
                self.stats.requests[method] += 1
            if self._hook is not None:
                self._hook(method, urlsplit(url).path, status)
        return resp

    def send(
        self, op: str, attempt: Callable[[], requests.Response], *, retry: bool = True
    ) -> requests.Response:
        """Run `attempt`, retrying transient faults within the retry policy's budget.

        With `retry=False` (one request of an upload session) a transient status
        comes back as it is, for the caller to restart or resume the session.
        """
        if not retry:
            return attempt()
        return self.retrying(op, lambda: self.settled(op, attempt()))

    def settled(self, op: str, resp: requests.Response) -> requests.Response:
        """`resp`, unless its status is transient: then a transient error."""
        if resp.status_code not in TRANSIENT_STATUS:
            return resp
        with resp:
            raise self._error(op, resp)

    def read_body(self, op: str, resp: requests.Response, limit: int) -> bytes:
        """A streamed body of at most `limit` bytes; a broken or oversized one is an error."""
        try:
            data, whole = read_capped(resp, limit)
        except requests.RequestException as exc:
            detail = f"the answer broke off ({failure_reason(exc)})"
            raise self._error_type(self.where, op, detail, transient=True) from exc
        if not whole:
            raise self._error_type(self.where, op, f"the answer is larger than {limit} bytes")
        return data

    # The names the registry client calls them by.
    _raw = exchange
    _send = send
    _settled = settled
    _retrying = retrying
    _pause_or_raise = pause_or_raise
    _read_body = read_body

    def _error(self, op: str, resp: requests.Response) -> RemoteError:
        """The typed error for an unexpected answer: `HTTP <status>`, then `_explain`'s detail."""
        status = resp.status_code
        detail, codes, kind = self._explain(resp)
        return kind(
            self.where,
            op,
            f"HTTP {status}{detail}",
            status=status,
            codes=codes,
            transient=status in TRANSIENT_STATUS,
            retry_after=parse_retry_after(resp.headers.get("Retry-After")),
        )

    def _explain(self, resp: requests.Response) -> tuple[str, Sequence[str], type[RemoteError]]:
        """What an unexpected answer's body says: text after the status, codes, error class.

        Nothing here; a subclass reads its server's error body.
        """
        return "", (), self._error_type

    def _tls_error(
        self, op: str, exc: requests.exceptions.SSLError, where: str = ""
    ) -> RemoteError:
        reason = failure_reason(exc)
        where = where or self.host.lower()
        if "CERTIFICATE_VERIFY_FAILED" not in str(exc) and not _has_verify_error(exc):
            return self._error_type(self.where, op, f"TLS with {where} failed ({reason})")
        verify = self._verify_for(where)
        trusted = (
            f"by the CA in {verify}" if isinstance(verify, str) else "by the default CA bundle"
        )
        return CertificateError(
            self.where,
            op,
            f"the TLS certificate of {where} is not trusted {trusted} ({reason}); to trust "
            f"the CA that signed it, {self._trust_hint_for(where)}",
        )

    def _trust_hint_for(self, where: str) -> str:
        """How to trust the CA of `where`: `trust_hint` for this host."""
        if where == self.host.lower():
            return self._trust_hint
        return f"add it to the system's CA bundle (it signed {where}, named by {self._server})"
