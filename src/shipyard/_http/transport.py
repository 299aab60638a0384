"""The HTTP side of the registry client: TLS, authentication, retries, errors, counting.

Every request goes out with what authentication earlier 401s taught (none at
first; see `auth.Authenticator`); a 401 is answered once and the request sent
again. Transient faults (no answer, a reset, a time-out, a body cut short, 429 and
5xx) are retried within a `RetryPolicy`, each retry logged with its reason on the
`shipyard._http.transport` logger; any other failure becomes a typed error naming
the registry and the operation, never a secret. `$SHIPYARD_HTTP_TIMEOUT` (seconds)
bounds each wait for an answer.

Plain HTTP is used only for loopback hosts (after a TLS probe, as docker does) or
with `insecure=True` / `$SHIPYARD_INSECURE_REGISTRIES` (comma-separated hosts).
That holds for every URL a registry names too (an upload `Location`, a `Link`
page, a token realm, a redirect): plain HTTP to any other host is refused before
a connection is made.

Credentials (basic or bearer) go only to the registry's own origin (scheme, host
and port) and to the token realm its challenge names. A URL on another origin is
followed without them, as docker and go-containerregistry do (blob downloads
redirected to storage); a challenge from another host is never answered. Redirects
are followed here, not by requests, so that every hop is checked the same way.
A private CA is trusted through `ca_file=`, `$SHIPYARD_REGISTRY_<HOST>_CA_FILE`
or docker's `certs.d/<host>/ca.crt`, in that order.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import logging
import os
import ssl
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar
from urllib.parse import urljoin, urlsplit

import requests

from shipyard._http.retry import (
    TRANSIENT_ERRORS,
    TRANSIENT_STATUS,
    Backoff,
    RetryPolicy,
    exception_chain,
    failure_reason,
    parse_retry_after,
)
from shipyard.errors import ShipyardError, UsageError
from shipyard.oci.remote.auth import (
    Authenticator,
    Challenge,
    Credentials,
    env_variable_names,
    parse_token_response,
)
from shipyard.oci.remote.reference import validate_host

__all__ = [
    "DEFAULT_CERTS_DIRS",
    "AuthError",
    "CertificateError",
    "NotFound",
    "PlainHTTPRefused",
    "RegistryError",
    "RegistryStats",
    "RequestHook",
    "Transport",
    "ca_variable_name",
    "failure_reason",
    "http_timeout",
    "is_loopback",
    "read_capped",
]

DEFAULT_CERTS_DIRS = (Path("/etc/docker/certs.d"), Path("/etc/containers/certs.d"))
DEFAULT_TIMEOUT = (10.0, 120.0)
TIMEOUT_VARIABLE = "SHIPYARD_HTTP_TIMEOUT"

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_REDIRECTS = 10
_DEFAULT_PORTS = {"http": 80, "https": 443}
_BODY_HEADERS = ("content-type", "content-length", "content-range")

_log = logging.getLogger(__name__)
_log.addHandler(logging.NullHandler())  # the library never prints; the CLI configures logging
_T = TypeVar("_T")


class RegistryError(ShipyardError):
    """A registry operation failed; the message names the registry and the operation (exit 1)."""

    def __init__(
        self,
        registry: str,
        operation: str,
        detail: str,
        *,
        status: int | None = None,
        codes: Sequence[str] = (),
        transient: bool = False,
        retry_after: float | None = None,
    ) -> None:
        self.registry = registry
        self.operation = operation
        self.status = status
        self.codes = tuple(codes)
        self.transient = transient
        self.retry_after = retry_after
        self.detail = detail
        super().__init__(f"{registry}: {operation}: {detail}")


class AuthError(RegistryError):
    """Authentication is missing, rejected or not enough; says how to log in (exit 2)."""

    exit_code = 2


class CertificateError(RegistryError):
    """The registry's TLS certificate is not trusted; says how to add the CA (exit 2)."""

    exit_code = 2


class NotFound(RegistryError):
    """The repository, blob, manifest or tag does not exist (HTTP 404)."""


class PlainHTTPRefused(RegistryError):
    """A registry named a plain-HTTP URL on a host off loopback; nothing was sent (exit 2)."""

    exit_code = 2


@dataclass
class RegistryStats:
    """What a Registry sent: requests per method, payload bytes, and blob outcomes."""

    requests: Counter[str] = field(default_factory=Counter)
    bytes_uploaded: int = 0
    bytes_downloaded: int = 0
    blobs_uploaded: int = 0
    blobs_mounted: int = 0
    blobs_skipped: int = 0
    retries: int = 0


RequestHook = Callable[[str, str, int | None], None]
"""Called after each HTTP exchange with method, URL path and status (None: no answer)."""


def http_timeout(
    environ: Mapping[str, str], default: tuple[float, float] = DEFAULT_TIMEOUT
) -> tuple[float, float]:
    """(connect, read) seconds: `$SHIPYARD_HTTP_TIMEOUT` bounds both, else `default`."""
    raw = environ.get(TIMEOUT_VARIABLE, "").strip()
    if not raw:
        return default
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < 86400:
        raise UsageError(
            f"{TIMEOUT_VARIABLE}={raw!r}: give the seconds to wait for an answer, e.g. 30"
        )
    return min(default[0], seconds), seconds


def ca_variable_name(host: str) -> str:
    """The per-host CA bundle variable, e.g. `SHIPYARD_REGISTRY_127_0_0_1_5000_CA_FILE`."""
    return env_variable_names(host)[0].removesuffix("_USER") + "_CA_FILE"


def is_loopback(host: str) -> bool:
    """True for `localhost`, 127.0.0.0/8 and ::1, with or without a port."""
    if host.startswith("["):
        name = host[1 : host.find("]")]
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    name = name.split("%", 1)[0]
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of `url`, the port filled in from the scheme: a credential's scope."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = -1  # not a port: matches no origin
    return scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(scheme)


def _authority(url: str) -> str:
    """`host:port` of `url` as written, without any `user:password@`, lower-cased."""
    return urlsplit(url).netloc.rpartition("@")[2].lower()


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


def _error_codes(resp: requests.Response) -> tuple[list[str], list[str]]:
    """The `errors[].code` and `errors[].message` of an OCI error body, if any."""
    if resp.request.method == "HEAD":
        return [], []
    try:
        data, _ = read_capped(resp, 64 << 10)
        errors = json.loads(data)["errors"][:5]
        codes = [str(e["code"])[:60] for e in errors if "code" in e]
        messages = [str(e["message"])[:200] for e in errors if e.get("message")]
    except (ValueError, KeyError, TypeError, IndexError, requests.RequestException):
        return [], []
    return codes, messages


class Transport:
    """Authenticated, retrying HTTP to one registry host; `Registry` adds the OCI API.

    `credentials` default to `auth.find_credentials(host)`, read on the first 401;
    `global_credentials=False` leaves out the global `SHIPYARD_REGISTRY_USER` pair,
    for a registry that is not a push target (a base image's): then only what is
    configured for `host` itself is used, else the registry is used anonymously.
    `insecure=True` allows plain HTTP and skips TLS verification, as docker's
    insecure-registries does. `stats` counts what was sent, for callers and tests.
    """

    def __init__(
        self,
        host: str,
        *,
        credentials: Credentials | None = None,
        insecure: bool = False,
        ca_file: Path | None = None,
        certs_dirs: Sequence[Path] = DEFAULT_CERTS_DIRS,
        timeout: tuple[float, float] | None = None,
        retry: RetryPolicy | None = None,
        chunk_size: int = 16 << 20,
        chunk_threshold: int = 256 << 20,
        environ: Mapping[str, str] | None = None,
        session: requests.Session | None = None,
        on_request: RequestHook | None = None,
        global_credentials: bool = True,
    ) -> None:
        env = os.environ if environ is None else environ
        scheme, sep, bare = host.partition("://")
        if not sep:
            scheme, bare = "", host
        if scheme not in ("", "http", "https"):
            raise UsageError(f"registry {host!r}: the scheme must be http:// or https://")
        self.host = validate_host(bare.rstrip("/"))
        listed = {h.strip() for h in env.get("SHIPYARD_INSECURE_REGISTRIES", "").split(",")}
        self.insecure = insecure or self.host in listed
        self._insecure_hosts = frozenset(h.lower() for h in listed if h)
        self._loopback = is_loopback(self.host)
        plain_ok = self.insecure or self._loopback
        if scheme == "http" and not plain_ok:
            raise UsageError(
                f"registry {self.host}: plain HTTP is only used for loopback hosts; use https://, "
                f"or allow it with insecure=True or SHIPYARD_INSECURE_REGISTRIES={self.host}"
            )
        self._ca_variable = ca_variable_name(self.host)
        if ca_file is None and env.get(self._ca_variable):
            ca_file = Path(env[self._ca_variable])
            if not ca_file.is_file():
                raise UsageError(
                    f"registry {self.host}: {self._ca_variable}={ca_file} names no file; "
                    "give the path of the PEM certificate of the CA that signed the registry's"
                )
        if ca_file is None:
            found = (d / self.host / "ca.crt" for d in certs_dirs)
            ca_file = next((p for p in found if p.is_file()), None)
        elif not ca_file.is_file():
            raise UsageError(f"registry {self.host}: CA certificate {ca_file} does not exist")
        self.ca_file = ca_file
        self._verify: bool | str = str(ca_file) if ca_file else not self.insecure
        self._scheme = scheme or ("https" if ca_file or not plain_ok else "")
        self._timeout = timeout or http_timeout(env)
        self._retry = retry or RetryPolicy()
        self._chunk_size, self._chunk_threshold = chunk_size, chunk_threshold
        self._session = session or requests.Session()
        if session is None and self._loopback:
            self._session.trust_env = False  # a loopback registry is never behind a proxy
        self._session.headers["User-Agent"] = "shipyard"
        self._hook = on_request
        self._lock = threading.Lock()
        self._scheme_lock = threading.Lock()
        self.stats = RegistryStats()
        self._auth = Authenticator(
            self.host,
            credentials,
            fetch_token=self._fetch_token,
            environ=env,
            clock=self._retry.clock,
            use_global=global_credentials,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.host!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the pooled connections (the client may still be used; it reconnects)."""
        self._session.close()

    def _url(self, path: str) -> str:
        if not self._scheme:
            with self._scheme_lock:
                if not self._scheme:
                    self._scheme = self._probe()
        return f"{self._scheme}://{self.host}{path}"

    def _probe(self) -> str:
        """https if the host speaks TLS (even with an untrusted certificate), else http."""
        try:
            connect, read = self._timeout
            timeout = (min(5.0, connect), min(10.0, read))
            self._raw("GET", f"https://{self.host}/v2/", "probe TLS", timeout=timeout).close()
        except CertificateError:
            return "https"
        except RegistryError:
            return "http"
        return "https"

    def _count(self, name: str = "", amount: int = 0, **counts: int) -> None:
        if name:
            counts[name] = amount
        with self._lock:
            for key, value in counts.items():
                setattr(self.stats, key, getattr(self.stats, key) + value)

    def _owns(self, url: str) -> bool:
        """True if `url` is on this registry's own origin, where its credentials may go."""
        return _origin(url) == _origin(self._url("/"))

    def _check_plain_http(self, url: str, op: str) -> None:
        """Refuse, before any connection, a URL that is not http(s) or is plain HTTP off loopback.

        Plain HTTP is allowed for loopback hosts, this registry when it is insecure,
        and the hosts listed in $SHIPYARD_INSECURE_REGISTRIES, whoever named the URL.
        """
        scheme, authority = urlsplit(url).scheme.lower(), _authority(url)
        if scheme == "https" and authority:
            return
        if scheme != "http" or not authority:
            raise RegistryError(self.host, op, f"{scheme or 'a'}:// URL is not http(s)")
        if is_loopback(authority) or authority in self._insecure_hosts:
            return
        if self.insecure and authority == self.host.lower():
            return
        raise PlainHTTPRefused(
            self.host,
            op,
            f"refusing plain HTTP to {authority}, named by the registry: credentials and "
            f"content would cross the network in clear; nothing was sent. If {authority} is "
            f"trusted, add it to SHIPYARD_INSECURE_REGISTRIES",
        )

    def _raw(
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
    ) -> requests.Response:
        """One HTTP exchange, following redirects here so that each hop is checked.

        Every URL is checked for plain HTTP first. A hop to another origin (scheme,
        host or port) goes without the `Authorization` header and `auth`, and never
        gets them back. 303, and 301/302 after a POST, become a GET without a body;
        307/308 send the body again (`body` makes it afresh). The answer's `url` is
        the URL of the last hop.
        """
        sent = dict(headers or {})
        for _ in range(_MAX_REDIRECTS + 1):
            data = body() if body is not None else None
            resp = self._exchange(method, url, op, sent, data, params, auth, stream, timeout)
            location = resp.headers.get("Location")
            if resp.status_code not in _REDIRECTS or not location:
                return resp
            resp.close()
            target = urljoin(resp.url or url, location)
            if _origin(target) != _origin(url):
                sent = {k: v for k, v in sent.items() if k.lower() != "authorization"}
                auth = None
            if (resp.status_code == 303 and method != "HEAD") or (
                resp.status_code in (301, 302) and method == "POST"
            ):
                method, body = "GET", None
                sent = {k: v for k, v in sent.items() if k.lower() not in _BODY_HEADERS}
            url, params = target, None
        raise RegistryError(self.host, op, f"more than {_MAX_REDIRECTS} redirects")

    def _exchange(
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
        same_host = _authority(url) == self.host.lower()
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
                verify=self._verify if same_host else not self.insecure,
                allow_redirects=False,
            )
            status = resp.status_code
        except requests.exceptions.SSLError as exc:
            raise self._tls_error(op, exc) from exc
        except TRANSIENT_ERRORS as exc:
            where, why = urlsplit(url).netloc, failure_reason(exc)
            broken = (requests.ConnectionError, requests.Timeout)
            detail = f"no answer from {where} ({why})"
            if not isinstance(exc, broken):  # the body was cut short or garbled
                detail = f"the answer from {where} broke off ({why})"
            raise RegistryError(self.host, op, detail, transient=True) from exc
        except requests.RequestException as exc:
            detail = f"the request to {urlsplit(url).netloc} failed ({failure_reason(exc)})"
            raise RegistryError(self.host, op, detail) from exc
        finally:
            with self._lock:
                self.stats.requests[method] += 1
            if self._hook is not None:
                self._hook(method, urlsplit(url).path, status)
        return resp

    def _authorized(
        self,
        method: str,
        url: str,
        op: str,
        scopes: Sequence[str],
        headers: Mapping[str, str] | None = None,
        body: Callable[[], Any] | None = None,
        *,
        stream: bool = False,
    ) -> requests.Response:
        """Send with what auth we know; on a 401 answer the challenge and send once more.

        Only a URL on the registry's own origin gets credentials; a URL elsewhere
        (one the registry named) goes without, and its challenge is not answered.
        """
        own = self._owns(url)

        def send(authorization: str | None) -> requests.Response:
            sent = dict(headers or {})
            if authorization and own:
                sent["Authorization"] = authorization
            return self._raw(method, url, op, headers=sent, body=body, stream=stream)

        resp = send(self._auth.header(scopes) if own else None)
        if resp.status_code != 401:
            return resp
        challenge = resp.headers.get("WWW-Authenticate", "")
        resp.close()
        if not self._owns(resp.url or url):
            raise self._foreign_auth_error(op, resp.url or url)
        answer = self._auth.answer(challenge, scopes)
        if answer is None:
            raise self._auth_error(op, 401)
        resp = send(answer)
        if resp.status_code == 401:
            resp.close()
            raise self._auth_error(op, 401)
        return resp

    def _send(
        self, op: str, attempt: Callable[[], requests.Response], *, retry: bool = True
    ) -> requests.Response:
        """Run `attempt`, retrying transient faults within the retry policy's budget.

        With `retry=False` (one request of an upload session) a transient status
        comes back as it is, for the caller to restart or resume the session.
        """
        if not retry:
            return attempt()
        return self._retrying(op, lambda: self._settled(op, attempt()))

    def _settled(self, op: str, resp: requests.Response) -> requests.Response:
        """`resp`, unless its status is transient: then a transient RegistryError."""
        if resp.status_code not in TRANSIENT_STATUS:
            return resp
        with resp:
            raise self._error(op, resp)

    def _retrying(self, op: str, attempt: Callable[[], _T]) -> _T:
        """Call `attempt` until it returns, retrying its transient RegistryErrors."""
        backoff = self._retry.start()
        while True:
            try:
                return attempt()
            except RegistryError as exc:
                self._pause_or_raise(op, exc, backoff)

    def _pause_or_raise(self, op: str, exc: RegistryError, backoff: Backoff) -> None:
        """After `exc`: log and sleep before a retry, or raise when it is final.

        A non-transient error is raised as it is; a transient one whose budget is
        spent becomes a final error saying how many attempts were made.
        """
        if not exc.transient:
            raise exc
        delay = backoff.next_delay(exc.retry_after)
        if delay is None:
            detail = f"{exc.detail}; gave up after {backoff.attempt} attempts"
            raise RegistryError(self.host, op, detail, status=exc.status, codes=exc.codes) from exc
        _log.warning(
            "%s: %s: retry %d of %d in %.2f s after: %s",
            self.host,
            op,
            backoff.attempt,
            backoff.attempts - 1,
            delay,
            exc.detail,
        )
        self._count(retries=1)
        backoff.sleep(delay)

    def _read_body(self, op: str, resp: requests.Response, limit: int) -> bytes:
        """A streamed body of at most `limit` bytes; a broken or oversized one is an error."""
        try:
            data, whole = read_capped(resp, limit)
        except requests.RequestException as exc:
            detail = f"the answer broke off ({failure_reason(exc)})"
            raise RegistryError(self.host, op, detail, transient=True) from exc
        if not whole:
            raise RegistryError(self.host, op, f"the answer is larger than {limit} bytes")
        return data

    def _error(self, op: str, resp: requests.Response) -> RegistryError:
        """The typed error for an unexpected answer, with the registry's error codes."""
        status = resp.status_code
        if status in (401, 403):
            return self._auth_error(op, status)
        codes, messages = _error_codes(resp)
        detail = f"HTTP {status}" + "".join(f" {c}" for c in codes)
        if messages:
            detail += ": " + "; ".join(messages)
        kind = NotFound if status == 404 else RegistryError
        return kind(
            self.host,
            op,
            detail,
            status=status,
            codes=codes,
            transient=status in TRANSIENT_STATUS,
            retry_after=parse_retry_after(resp.headers.get("Retry-After")),
        )

    def _foreign_auth_error(self, op: str, url: str) -> AuthError:
        """A URL on another host than the registry asked for authentication: not given."""
        where = _authority(url)
        return AuthError(
            self.host,
            op,
            f"{where}, where {self.host} sent this request, asks for authentication (HTTP "
            f"401); the credentials for {self.host} are sent only to {self.host} and its token "
            "service, never to another host",
            status=401,
        )

    def _auth_error(self, op: str, status: int) -> AuthError:
        """Why authentication failed and how to log in; never the secret itself."""
        found = self._auth.credentials()
        user_var, password_var = env_variable_names(self.host)
        login = (
            f"log in with `docker login {self.host}`, or set SHIPYARD_REGISTRY_USER and "
            f"SHIPYARD_REGISTRY_PASSWORD (or {user_var} and {password_var})"
        )
        if not self._auth.use_global:
            login = (
                f"log in with `docker login {self.host}`, or set {user_var} and {password_var} "
                "(SHIPYARD_REGISTRY_USER and SHIPYARD_REGISTRY_PASSWORD are only sent to the "
                "registries shipyard pushes to)"
            )
        if found is None:
            why = f"the registry requires authentication (HTTP {status}) and no credentials were "
            why += f"found for {self.host}"
        elif status == 403:
            why = f"access denied (HTTP 403) to the account from {found.source}"
        else:
            why = f"the registry rejected the credentials from {found.source} (HTTP {status})"
        return AuthError(self.host, op, f"{why}; {login}", status=status)

    def _tls_error(self, op: str, exc: requests.exceptions.SSLError) -> RegistryError:
        reason = failure_reason(exc)
        if "CERTIFICATE_VERIFY_FAILED" not in str(exc) and not _has_verify_error(exc):
            return RegistryError(self.host, op, f"TLS with {self.host} failed ({reason})")
        trusted = f"by the CA in {self.ca_file}" if self.ca_file else "by the default CA bundle"
        return CertificateError(
            self.host,
            op,
            f"the TLS certificate of {self.host} is not trusted {trusted} ({reason}); to trust "
            f"the CA that signed it, set {self._ca_variable}=/path/to/ca.pem (its PEM "
            f"certificate), or save that certificate as /etc/docker/certs.d/{self.host}/ca.crt, "
            f"or pass ca_file=PATH to the Registry",
        )

    def _fetch_token(
        self, challenge: Challenge, scopes: tuple[str, ...], found: Credentials | None
    ) -> tuple[str, float]:
        """Ask the challenge's realm for a bearer token for `scopes` (docker's token flow)."""
        op = "get a token for " + (" ".join(scopes) or "the registry")
        realm = urlsplit(challenge.realm)
        if realm.scheme not in ("http", "https") or not realm.netloc:
            raise RegistryError(self.host, op, f"the token realm {challenge.realm!r} is not a URL")
        self._check_plain_http(challenge.realm, op)
        service = challenge.params.get("service")
        attempt: Callable[[], requests.Response]
        if found is not None and found.identity_token:
            form = {"grant_type": "refresh_token", "refresh_token": found.identity_token}
            form["client_id"] = "shipyard"
            if scopes:
                form["scope"] = " ".join(scopes)
            if service:
                form["service"] = service
            attempt = functools.partial(self._raw, "POST", challenge.realm, op, body=lambda: form)
        else:
            params = [("service", service)] if service else []
            params += [("scope", scope) for scope in scopes]
            basic = (found.username, found.password) if found and found.password else None
            attempt = functools.partial(
                self._raw, "GET", challenge.realm, op, params=params, auth=basic
            )
        with self._send(op, attempt) as resp:
            if resp.status_code in (401, 403):
                raise self._auth_error(op, resp.status_code)
            if resp.status_code != 200:
                raise self._error(op, resp)
            try:
                return parse_token_response(resp.json())
            except ValueError as exc:
                raise RegistryError(self.host, op, f"bad token response: {exc}") from None
