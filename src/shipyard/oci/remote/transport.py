"""The registry side of HTTP: which host, which CA, who may be sent credentials, errors.

`Transport` is `shipyard._http.transport.Client` (TLS, plain HTTP, redirects,
retries, typed errors) for one registry host, plus what only a registry means:
the host and `$SHIPYARD_INSECURE_REGISTRIES`, a private CA from
`$SHIPYARD_REGISTRY_<HOST>_CA_FILE` or docker's `certs.d/<host>/ca.crt`, the TLS
probe of a host named without a scheme, the OCI error body, and authentication.

Every request goes out with what authentication earlier 401s taught (none at
first; see `auth.Authenticator`); a 401 is answered once and the request sent
again. Credentials (basic or bearer) go only to the registry's own origin (scheme,
host and port) and to the token realm its challenge names. A URL on another origin
is followed without them, as docker and go-containerregistry do (blob downloads
redirected to storage); a challenge from another host is never answered. A URL's
host is the one requests connects to; a URL the registry names whose host part
URL parsers could read differently (`http://EVIL\\@REG/`, a `user@`) is refused
with `UnsafeURL` (exit 2) before anything is sent. `insecure` skips TLS
verification for the registry's own host only: a token realm or storage host
elsewhere is verified (against its own `$SHIPYARD_REGISTRY_<HOST>_CA_FILE` or
`certs.d/<host>/ca.crt` when there is one). Plain
HTTP is used only for loopback hosts (after a TLS probe, as docker does) or with
`insecure=True` / `$SHIPYARD_INSECURE_REGISTRIES` (comma-separated hosts), for every
URL a registry names too (an upload `Location`, a `Link` page, a token realm, a
redirect).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

from shipyard import _json
from shipyard._environ import INSECURE_REGISTRIES, REGISTRY_HOST_CA_FILE
from shipyard._http.errors import CertificateError, PlainHTTPRefused, RemoteError, UnsafeURL
from shipyard._http.retry import RetryPolicy
from shipyard._http.settings import ca_file_from, http_timeout
from shipyard._http.transport import Client, HTTPStats, RequestHook, read_capped
from shipyard._http.urls import authority, is_loopback, origin
from shipyard.errors import UsageError
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
    "UnsafeURL",
    "ca_variable_name",
]

DEFAULT_CERTS_DIRS = (Path("/etc/docker/certs.d"), Path("/etc/containers/certs.d"))

RegistryError = RemoteError
"""A registry operation failed; the message names the registry and the operation (exit 1).

The registry's name for `shipyard._http.errors.RemoteError`, so that TLS and
plain-HTTP refusals (`CertificateError`, `PlainHTTPRefused`) are RegistryErrors too.
"""


class AuthError(RegistryError):
    """Authentication is missing, rejected or not enough; says how to log in (exit 2)."""

    exit_code = 2


class NotFound(RegistryError):
    """The repository, blob, manifest or tag does not exist (HTTP 404)."""


@dataclass
class RegistryStats(HTTPStats):
    """What a Registry sent: requests per method, payload bytes, and blob outcomes."""

    bytes_uploaded: int = 0
    bytes_downloaded: int = 0
    blobs_uploaded: int = 0
    blobs_mounted: int = 0
    blobs_skipped: int = 0


def ca_variable_name(host: str) -> str:
    """The per-host CA bundle variable, e.g. `SHIPYARD_REGISTRY_127_0_0_1_5000_CA_FILE`."""
    return REGISTRY_HOST_CA_FILE.member(host)


@dataclass(frozen=True)
class _Endpoint:
    """Where a registry is and how it may be reached: the scheme it was named with ("":
    probe), its host, whether it is insecure, the hosts listed as insecure, and whether
    it is a loopback host."""

    scheme: str
    host: str
    insecure: bool
    listed: frozenset[str]
    loopback: bool

    @property
    def plain_ok(self) -> bool:
        """Whether plain HTTP may be used for it."""
        return self.insecure or self.loopback


def _endpoint(host: str, insecure: bool, env: Mapping[str, str]) -> _Endpoint:
    """The registry `host` (`host[:port]`, optionally `http(s)://`) names, checked:
    UsageError for another scheme, a bad host, or plain HTTP to a host off loopback
    that is not insecure (`insecure` or listed in $SHIPYARD_INSECURE_REGISTRIES)."""
    scheme, sep, bare = host.partition("://")
    if not sep:
        scheme, bare = "", host
    if scheme not in ("", "http", "https"):
        raise UsageError(f"registry {host!r}: the scheme must be http:// or https://")
    host = validate_host(bare.rstrip("/"))
    listed = {h.strip() for h in env.get(INSECURE_REGISTRIES.name, "").split(",")}
    end = _Endpoint(scheme, host, insecure or host in listed, frozenset(listed), is_loopback(host))
    if scheme == "http" and not end.plain_ok:
        raise UsageError(
            f"registry {host}: plain HTTP is only used for loopback hosts; use https://, "
            f"or allow it with insecure=True or SHIPYARD_INSECURE_REGISTRIES={host}"
        )
    return end


def _ca_file(
    env: Mapping[str, str], host: str, given: Path | None, certs_dirs: Sequence[Path], what: str
) -> Path | None:
    """The private CA of `host`: `given`, else the file its `ca_variable_name` names, else
    docker's `certs.d/<host>/ca.crt` in `certs_dirs`; None when there is none."""
    found = ca_file_from(env, ca_variable_name(host), given, what)
    if found is None:
        paths = (d / host / "ca.crt" for d in certs_dirs)
        found = next((p for p in paths if p.is_file()), None)
    return found


def _trust_hint(host: str) -> str:
    """How to trust the CA that signed `host`'s certificate."""
    return (
        f"set {ca_variable_name(host)}=/path/to/ca.pem (its PEM certificate), or save that "
        f"certificate as /etc/docker/certs.d/{host}/ca.crt"
    )


def _error_codes(resp: requests.Response) -> tuple[list[str], list[str]]:
    """The `errors[].code` and `errors[].message` of an OCI error body, if any."""
    if resp.request.method == "HEAD":
        return [], []
    try:
        data, _ = read_capped(resp, 64 << 10)
        errors = [e for e in _json.loads(data)["errors"][:5] if isinstance(e, dict)]
        codes = [str(e["code"])[:60] for e in errors if isinstance(e.get("code"), str)]
        messages = [str(e["message"])[:200] for e in errors if isinstance(e.get("message"), str)]
    except (ValueError, KeyError, TypeError, IndexError, requests.RequestException):
        return [], []
    return codes, messages


class Transport(Client):
    """Authenticated, retrying HTTP to one registry host; `Registry` adds the OCI API.

    `credentials` default to `auth.find_credentials(host)`, read on the first 401;
    `global_credentials=False` leaves out the global `SHIPYARD_REGISTRY_USER` pair,
    for a registry that is not a push target (a base image's): then only what is
    configured for `host` itself is used, else the registry is used anonymously.
    `insecure=True` allows plain HTTP and skips TLS verification, as docker's
    insecure-registries does. `stats` counts what was sent, for callers and tests.
    """

    stats: RegistryStats

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
        end = _endpoint(host, insecure, env)
        ca_file = _ca_file(env, end.host, ca_file, certs_dirs, f"registry {end.host}")
        if session is None and end.loopback:
            session = requests.Session()
            session.trust_env = False  # a loopback registry is never behind a proxy
        super().__init__(
            end.host,
            server="the registry",
            scheme=end.scheme or ("https" if ca_file or not end.plain_ok else ""),
            insecure=end.insecure,
            insecure_hosts=end.listed,
            insecure_hint="add it to SHIPYARD_INSECURE_REGISTRIES",
            ca_file=ca_file,
            trust_hint=f"{_trust_hint(end.host)}, or pass ca_file=PATH to the Registry",
            timeout=timeout or http_timeout(env),
            retry=retry,
            session=session,
            on_request=on_request,
            stats=RegistryStats(),
        )
        self._chunk_size, self._chunk_threshold = chunk_size, chunk_threshold
        self._environ, self._certs_dirs = env, tuple(certs_dirs)
        self._scheme_lock = threading.Lock()
        self._auth = Authenticator(
            self.host,
            credentials,
            fetch_token=self._fetch_token,
            environ=env,
            clock=self._retry.clock,
            use_global=global_credentials,
        )

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
            self.exchange("GET", f"https://{self.host}/v2/", "probe TLS", timeout=timeout).close()
        except CertificateError:
            return "https"
        except RegistryError:
            return "http"
        return "https"

    def _ca_file_for(self, where: str) -> Path | None:
        """The private CA of another host (a token realm, storage), configured as a registry's."""
        try:
            validate_host(where)
        except UsageError:
            return None
        return _ca_file(self._environ, where, None, self._certs_dirs, f"host {where}")

    def _trust_hint_for(self, where: str) -> str:
        """How to trust the CA of `where`: the per-host variable or certs.d file."""
        if where == self.host.lower():
            return super()._trust_hint_for(where)
        return _trust_hint(where)

    def _owns(self, url: str) -> bool:
        """True if `url` is on this registry's own origin, where its credentials may go."""
        return origin(url) == origin(self._url("/"))

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
        An ambiguous URL is refused first (`UnsafeURL`).
        """
        url = self.checked_url(url, op)
        own = self._owns(url)

        def send(authorization: str | None) -> requests.Response:
            sent = dict(headers or {})
            if authorization and own:
                sent["Authorization"] = authorization
            return self.exchange(method, url, op, headers=sent, body=body, stream=stream)

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

    def _error(self, op: str, resp: requests.Response) -> RegistryError:
        """The typed error for an unexpected answer, with the registry's error codes."""
        if resp.status_code in (401, 403):
            return self._auth_error(op, resp.status_code)
        return super()._error(op, resp)

    def _explain(self, resp: requests.Response) -> tuple[str, Sequence[str], type[RegistryError]]:
        """The OCI error body's codes and messages; 404 is NotFound."""
        codes, messages = _error_codes(resp)
        detail = "".join(f" {c}" for c in codes) + (": " + "; ".join(messages) if messages else "")
        return detail, codes, NotFound if resp.status_code == 404 else RegistryError

    def _foreign_auth_error(self, op: str, url: str) -> AuthError:
        """A URL on another host than the registry asked for authentication: not given."""
        where = authority(url)
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

    def _fetch_token(
        self, challenge: Challenge, scopes: tuple[str, ...], found: Credentials | None
    ) -> tuple[str, float]:
        """Ask the challenge's realm for a bearer token for `scopes` (docker's token flow)."""
        op = "get a token for " + (" ".join(scopes) or "the registry")
        parts = urlsplit(challenge.realm)
        if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
            raise RegistryError(self.host, op, f"the token realm {challenge.realm!r} is not a URL")
        realm = self.checked_url(challenge.realm, op)
        self._check_plain_http(realm, op)
        service = challenge.params.get("service")
        attempt: Callable[[], requests.Response]
        if found is not None and found.identity_token:
            form = {"grant_type": "refresh_token", "refresh_token": found.identity_token}
            form["client_id"] = "shipyard"
            if scopes:
                form["scope"] = " ".join(scopes)
            if service:
                form["service"] = service
            attempt = functools.partial(self.exchange, "POST", realm, op, body=lambda: form)
        else:
            params = [("service", service)] if service else []
            params += [("scope", scope) for scope in scopes]
            basic = (found.username, found.password) if found and found.password else None
            attempt = functools.partial(self.exchange, "GET", realm, op, params=params, auth=basic)
        with self.send(op, attempt) as resp:
            if resp.status_code in (401, 403):
                raise self._auth_error(op, resp.status_code)
            if resp.status_code != 200:
                raise self._error(op, resp)
            try:
                return parse_token_response(_json.loads(resp.content))
            except ValueError as exc:
                raise RegistryError(self.host, op, f"bad token response: {exc}") from None
