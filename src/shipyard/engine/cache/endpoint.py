"""Where a shared cache lives (`--cache=URL`) and how to talk to it.

Three protocols share one shape: `oci://HOST[:PORT]/REPOSITORY` (a registry
repository), `http[s]://HOST[:PORT][/PREFIX]` (the HTTP cache protocol bazel-remote
serves: `/ac/<key>` and `/cas/<sha256>`) and `grpc[s]://HOST[:PORT][/INSTANCE]`
(the Remote Execution API's CAS, ActionCache and ByteStream). Secrets never come
from a URL or the manifest: a bearer token, an API-key header and Basic credentials
come from the environment (`Connection.from_env`), so a cache URL can be logged.

Each protocol's client loads only for a build that names such a cache (the no-op
build imports none of them); `open_remote` picks it by the URL's scheme.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard import _environ
from shipyard.errors import ShipyardError, UsageError

if TYPE_CHECKING:
    from shipyard.engine.wrapper import OutputCache

__all__ = [
    "SCHEMES",
    "CacheEndpoint",
    "Connection",
    "RemoteStats",
    "RemoteUnavailable",
    "open_remote",
    "parse_endpoint",
]

SCHEMES = ("oci", "http", "https", "grpc", "grpcs")
_FORMS = (
    "write oci://HOST[:PORT]/REPOSITORY, http[s]://HOST[:PORT][/PREFIX] "
    "or grpc[s]://HOST[:PORT][/INSTANCE]"
)

TOKEN_VARIABLE = _environ.CACHE_TOKEN.name  # sent as `authorization: Bearer TOKEN`
HEADERS_VARIABLE = _environ.CACHE_HEADERS.name  # NAME=VALUE,NAME=VALUE (e.g. an API key)
USER_VARIABLE = _environ.CACHE_USER.name  # HTTP Basic, with the next one
PASSWORD_VARIABLE = _environ.CACHE_PASSWORD.name
CA_VARIABLE = _environ.CACHE_CA.name  # PEM file: the CA that signed the server's certificate
CERT_VARIABLE = _environ.CACHE_CERT.name  # PEM file: a client certificate (mutual TLS)
KEY_VARIABLE = _environ.CACHE_KEY.name  # PEM file: the client certificate's key
TIMEOUT_VARIABLE = _environ.CACHE_TIMEOUT.name  # seconds per call
# seconds the calls before the server's first answer may take, retries included
CONNECT_TIMEOUT_VARIABLE = _environ.CACHE_CONNECT_TIMEOUT.name
RETRIES_VARIABLE = _environ.CACHE_RETRIES.name  # further tries of a call that failed on the way


@dataclass
class RemoteStats:
    """What a remote cache client did in one build: for report.json and the benchmark."""

    calls: int = 0  # requests sent (retries included)
    hits: int = 0  # actions restored from the server
    misses: int = 0  # actions the server did not have (or had in a form refused)
    stored: int = 0  # actions written to the server
    bytes_down: int = 0  # payload bytes received
    bytes_up: int = 0  # payload bytes sent


class RemoteUnavailable(ShipyardError):
    """The cache server could not be reached, or did not answer in time, after the
    bounded retries. A build goes on without the remote cache (one warning)."""


@dataclass(frozen=True)
class CacheEndpoint:
    """A parsed `--cache=URL`."""

    scheme: str  # one of SCHEMES
    host: str  # HOST[:PORT], as written
    path: str  # oci: the repository; http: the prefix; grpc: the instance name ('' for none)
    url: str  # as given, for messages

    @property
    def tls(self) -> bool:
        """True for https:// and grpcs://."""
        return self.scheme in ("https", "grpcs")


def parse_endpoint(url: str) -> CacheEndpoint:
    """`--cache=URL` as a CacheEndpoint; UsageError (exit 2) naming the flag otherwise."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SCHEMES:
        raise UsageError(f"--cache={url}: {_FORMS}")
    host, _, path = rest.partition("/")
    path = path.strip("/")
    if not host or "@" in host or any(c.isspace() for c in rest):
        raise UsageError(
            f"--cache={url}: {_FORMS} (credentials go in ${TOKEN_VARIABLE}, "
            f"${HEADERS_VARIABLE} or ${USER_VARIABLE}/${PASSWORD_VARIABLE}, never in the URL)"
        )
    if scheme == "oci" and not path:
        raise UsageError(f"--cache={url}: write oci://HOST[:PORT]/REPOSITORY")
    return CacheEndpoint(scheme, host, path, url)


@dataclass(frozen=True)
class Connection:
    """How to reach a cache server: TLS files, headers, credentials and patience."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    headers: tuple[tuple[str, str], ...] = ()  # sent with every call (lower-case names)
    basic: tuple[str, str] | None = None  # HTTP Basic (user, password)
    timeout: float = 30.0  # seconds per call
    retries: int = 2  # further tries of a call that failed on the way (not of a miss)
    # Until the server has answered once, a call and its retries take at most this
    # long: a server that never answers costs seconds, not 3 x `timeout`.
    connect_timeout: float = 5.0
    extra: Mapping[str, str] = field(default_factory=dict)  # reserved for protocol options

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Connection:
        """The connection the environment describes; UsageError naming the variable
        when one cannot be used."""
        env = os.environ if env is None else env
        headers = list(_headers(env.get(HEADERS_VARIABLE, "")))
        token = env.get(TOKEN_VARIABLE, "").strip()
        if token:
            headers.append(("authorization", f"Bearer {token}"))
        user = env.get(USER_VARIABLE, "")
        basic = (user, env.get(PASSWORD_VARIABLE, "")) if user else None
        return cls(
            ca_file=_file(env, CA_VARIABLE),
            cert_file=_file(env, CERT_VARIABLE),
            key_file=_file(env, KEY_VARIABLE),
            headers=tuple(headers),
            basic=basic,
            timeout=_number(env, TIMEOUT_VARIABLE, 30.0, float),
            retries=int(_number(env, RETRIES_VARIABLE, 2, int)),
            connect_timeout=_number(env, CONNECT_TIMEOUT_VARIABLE, 5.0, float),
        )


def _headers(text: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(
                f"{HEADERS_VARIABLE}: {item!r} is not NAME=VALUE; write e.g. "
                "x-api-key=SECRET,x-other=VALUE"
            )
        pairs.append((name.strip().lower(), value.strip()))
    return pairs


def _file(env: Mapping[str, str], variable: str) -> Path | None:
    raw = env.get(variable, "")
    if not raw:
        return None
    path = Path(raw)
    if not path.is_file():
        raise UsageError(f"{variable}={raw} names no file; give the path of a PEM file")
    return path


def _number(
    env: Mapping[str, str], variable: str, default: float, kind: Callable[[str], float]
) -> float:
    raw = env.get(variable, "").strip()
    if not raw:
        return default
    try:
        value = float(kind(raw))
    except ValueError:
        value = -1.0
    if not 0 <= value < 86400 or (kind is float and value == 0):
        raise UsageError(f"{variable}={raw!r}: give a positive number, e.g. {default:g}")
    return value


def open_remote(
    endpoint: CacheEndpoint, connection: Connection, env: Mapping[str, str] | None = None
) -> OutputCache:
    """The client of `endpoint`'s protocol, with the connection's patience. `env` is
    where a registry's own credentials and CA are looked up (default: os.environ).
    Each protocol's module is imported here, so only a build that names such a cache
    loads it."""
    if endpoint.scheme == "oci":
        from shipyard.engine.cache.remote import open_registry_cache

        return open_registry_cache(endpoint, connection, env)
    from shipyard.engine.cache.reapi import extra_needed, open_grpc_cache

    if endpoint.scheme in ("grpc", "grpcs"):
        return open_grpc_cache(endpoint, connection)
    # An HTTP cache's /ac/ entries are REAPI ActionResults: protobuf, the `remote` extra.
    with extra_needed(endpoint.url, "the HTTP cache protocol"):
        from shipyard.engine.cache.http import open_http_cache

    return open_http_cache(endpoint, connection)
