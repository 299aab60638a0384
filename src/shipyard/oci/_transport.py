"""The HTTP side of the registry client: TLS, authentication, retries, errors, counting.

Every request goes out with what authentication earlier 401s taught (none at
first; see `auth.Authenticator`); a 401 is answered once and the request sent
again. Transient faults (no answer, a reset, a time-out, a body cut short, 429 and
5xx) are retried within a `RetryPolicy`, each retry logged with its reason on the
`shipyard.oci._transport` logger; any other failure becomes a typed error naming
the registry and the operation, never a secret. `$SHIPYARD_HTTP_TIMEOUT` (seconds)
bounds each wait for an answer.

Plain HTTP is used only for loopback hosts (after a TLS probe, as docker does) or
with `insecure=True` / `$SHIPYARD_INSECURE_REGISTRIES` (comma-separated hosts).
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
from urllib.parse import urlsplit

import requests

from shipyard.errors import ShipyardError, UsageError
from shipyard.oci._retry import (
    TRANSIENT_ERRORS,
    TRANSIENT_STATUS,
    Backoff,
    RetryPolicy,
    exception_chain,
    failure_reason,
    parse_retry_after,
)
from shipyard.oci.auth import (
    Authenticator,
    Challenge,
    Credentials,
    env_variable_names,
    parse_token_response,
)
from shipyard.oci.reference import validate_host

__all__ = [
    "DEFAULT_CERTS_DIRS",
    "AuthError",
    "CertificateError",
    "NotFound",
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

    `credentials` default to `auth.find_credentials(host)`, read on the first 401.
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

    def _raw(self, method: str, url: str, op: str, **kwargs: Any) -> requests.Response:
        """One HTTP exchange, counted; connection and TLS failures become RegistryErrors."""
        same_host = urlsplit(url).netloc == self.host
        kwargs.setdefault("timeout", self._timeout)
        kwargs.setdefault("verify", self._verify if same_host else not self.insecure)
        status: int | None = None
        try:
            resp = self._session.request(method, url, **kwargs)
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
        """Send with what auth we know; on a 401 answer the challenge and send once more."""

        def send(authorization: str | None) -> requests.Response:
            sent = dict(headers or {})
            if authorization:
                sent["Authorization"] = authorization
            data = body() if body is not None else None
            return self._raw(method, url, op, headers=sent, data=data, stream=stream)

        resp = send(self._auth.header(scopes))
        if resp.status_code != 401:
            return resp
        challenge = resp.headers.get("WWW-Authenticate", "")
        resp.close()
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

    def _auth_error(self, op: str, status: int) -> AuthError:
        """Why authentication failed and how to log in; never the secret itself."""
        found = self._auth.credentials()
        user_var, password_var = env_variable_names(self.host)
        login = (
            f"log in with `docker login {self.host}`, or set SHIPYARD_REGISTRY_USER and "
            f"SHIPYARD_REGISTRY_PASSWORD (or {user_var} and {password_var})"
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
        if realm.scheme == "http" and not (self.insecure or is_loopback(realm.netloc)):
            raise RegistryError(self.host, op, f"refusing plain HTTP to realm {realm.netloc}")
        service = challenge.params.get("service")
        attempt: Callable[[], requests.Response]
        if found is not None and found.identity_token:
            form = {"grant_type": "refresh_token", "refresh_token": found.identity_token}
            form["client_id"] = "shipyard"
            if scopes:
                form["scope"] = " ".join(scopes)
            if service:
                form["service"] = service
            attempt = functools.partial(self._raw, "POST", challenge.realm, op, data=form)
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
