"""Registry credentials and authentication challenges.

Credentials for a registry host come from, in order:

1. `SHIPYARD_REGISTRY_<HOST>_USER` and `SHIPYARD_REGISTRY_<HOST>_PASSWORD`, where
   `<HOST>` is the host and port upper-cased with every other character turned
   into `_` (`127.0.0.1:5000` -> `SHIPYARD_REGISTRY_127_0_0_1_5000_USER`);
2. `SHIPYARD_REGISTRY_USER` and `SHIPYARD_REGISTRY_PASSWORD`, for the registries
   shipyard pushes to (the manifest's hubs, the `--cache=oci://` registry); never
   for a registry it only pulls from, such as a base image's (`use_global=False`);
3. docker's `config.json` (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`):
   `credHelpers[host]`, then `credsStore` (both run `docker-credential-<name> get`),
   then `auths[host]` (`auth` = base64 `user:password`, or `username`/`password`,
   or `identitytoken`).

`Authenticator` answers a registry's 401 challenges (`WWW-Authenticate`): Basic
with these credentials, Bearer with a token from the challenge's realm, cached per
set of scopes. The credentials of a host go to that host and its token realm only:
the transport never answers a challenge from a URL on another host (see
`shipyard._http.transport`). A secret never appears in a repr, a log line or an exception message.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shipyard._environ import (
    REGISTRY_HOST_PASSWORD,
    REGISTRY_HOST_USER,
    REGISTRY_PASSWORD,
    REGISTRY_USER,
)
from shipyard.errors import UsageError

__all__ = [
    "Authenticator",
    "Challenge",
    "Credentials",
    "docker_config_path",
    "env_variable_names",
    "find_credentials",
    "parse_challenges",
    "parse_token_response",
    "pull_scope",
    "push_scope",
    "redact",
]

_HELPER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# `user:password@` in a URL or host text; the password part is what `redact` hides.
# The password runs to the last @ before the host: it may hold an @ itself.
_USERINFO = re.compile(r"(?P<user>[^\s/@:'\"]*):(?P<password>[^\s/'\"]+)@")
_HELPER_TIMEOUT = 30.0
_TOKEN_CHARS = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_PARAM = re.compile(rf'\s*({_TOKEN_CHARS})\s*=\s*("(?:[^"\\]|\\.)*"|[^,\s]*)\s*,?')
_SCHEME = re.compile(rf"\s*({_TOKEN_CHARS})(?:\s+|\s*,\s*|\s*$)")


@dataclass(frozen=True, repr=False)
class Credentials:
    """A user name and password (or identity token) for one registry; its repr hides them."""

    username: str
    password: str
    identity_token: str | None = None
    source: str = "explicit credentials"

    def __repr__(self) -> str:
        return f"Credentials(source={self.source!r}, secret=<redacted>)"

    __str__ = __repr__


@dataclass(frozen=True)
class Challenge:
    """One `WWW-Authenticate` challenge: scheme (`basic`, `bearer`) and its parameters."""

    scheme: str
    params: Mapping[str, str] = field(default_factory=dict)

    @property
    def realm(self) -> str:
        """The token endpoint (bearer) or protection space (basic); empty if absent."""
        return self.params.get("realm", "")

    @property
    def scopes(self) -> tuple[str, ...]:
        """The scopes the registry asked for (space-separated in the header)."""
        return tuple(self.params.get("scope", "").split())


def pull_scope(repo: str) -> str:
    """The token scope to pull from `repo`."""
    return f"repository:{repo}:pull"


def push_scope(repo: str) -> str:
    """The token scope to push to `repo` (pushing needs pulling too)."""
    return f"repository:{repo}:pull,push"


def redact(text: str) -> str:
    """`text` with the password of every `user:password@` (a URL's userinfo) shown as ***.

    For messages that echo what a user wrote as a host or URL, where a password
    may have been put: `https://ci:hunter2@registry` -> `https://ci:***@registry`.
    """
    return _USERINFO.sub(lambda m: f"{m['user']}:***@", text)


def parse_challenges(header: str) -> list[Challenge]:
    """Parse a `WWW-Authenticate` value (possibly several challenges) into Challenges."""
    challenges: list[tuple[str, dict[str, str]]] = []
    pos = 0
    while pos < len(header):
        param = _PARAM.match(header, pos)
        if param and challenges:
            value = param.group(2)
            if value.startswith('"'):
                value = re.sub(r"\\(.)", r"\1", value[1:-1])
            challenges[-1][1][param.group(1).lower()] = value
            pos = param.end()
            continue
        scheme = _SCHEME.match(header, pos)
        if not scheme:
            break
        challenges.append((scheme.group(1).lower(), {}))
        pos = scheme.end()
    return [Challenge(scheme, params) for scheme, params in challenges]


def parse_token_response(payload: Any) -> tuple[str, float]:
    """The bearer token and its lifetime in seconds from a token endpoint's JSON answer."""
    if not isinstance(payload, dict):
        raise ValueError("token response is not a JSON object")
    token = payload.get("token") or payload.get("access_token")
    if not isinstance(token, str) or not token:
        raise ValueError("token response has no 'token' or 'access_token'")
    expires = payload.get("expires_in")
    lifetime = float(expires) if isinstance(expires, int | float) and expires > 0 else 60.0
    return token, lifetime


TokenFetcher = Callable[[Challenge, tuple[str, ...], "Credentials | None"], tuple[str, float]]


class Authenticator:
    """Answers one registry's challenges: Basic with credentials, Bearer with per-scope tokens.

    Credentials are looked up (`find_credentials`) only when a challenge needs them;
    `use_global=False` leaves out the global pair (a registry that is not a push
    target). What a 401 taught is remembered, so later requests carry their
    authorization up front. `fetch_token(challenge, scopes, credentials)` does the
    HTTP call to the realm and returns the token and its lifetime in seconds.
    """

    def __init__(
        self,
        host: str,
        credentials: Credentials | None = None,
        *,
        fetch_token: TokenFetcher,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        use_global: bool = True,
    ) -> None:
        self.host = host
        self.use_global = use_global
        self._credentials = credentials
        self._looked_up = credentials is not None
        self._environ = environ
        self._fetch = fetch_token
        self._clock = clock
        self._challenge: Challenge | None = None
        self._tokens: dict[tuple[str, ...], tuple[str, float]] = {}
        self._lock = threading.Lock()

    def credentials(self) -> Credentials | None:
        """The credentials for this host, looked up once on first use."""
        with self._lock:
            if not self._looked_up:
                self._credentials = find_credentials(
                    self.host, environ=self._environ, use_global=self.use_global
                )
                self._looked_up = True
            return self._credentials

    def header(self, scopes: Iterable[str]) -> str | None:
        """The Authorization value to send before any challenge, from what earlier ones taught."""
        challenge = self._challenge
        if challenge is None:
            return None
        if challenge.scheme == "basic":
            return self._basic()
        return self._bearer(challenge, scopes, fresh=False)

    def answer(self, www_authenticate: str, scopes: Iterable[str]) -> str | None:
        """The Authorization value answering a 401's challenge, or None when it cannot be met."""
        challenges = parse_challenges(www_authenticate)
        chosen = next((c for c in challenges if c.scheme == "bearer"), None) or next(
            (c for c in challenges if c.scheme == "basic"), None
        )
        if chosen is None:
            return None
        self._challenge = chosen
        if chosen.scheme == "basic":
            return self._basic()
        return self._bearer(chosen, [*scopes, *chosen.scopes], fresh=True)

    def _basic(self) -> str | None:
        found = self.credentials()
        if found is None or not found.password:
            return None
        raw = f"{found.username}:{found.password}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")

    def _bearer(self, challenge: Challenge, scopes: Iterable[str], *, fresh: bool) -> str:
        key = tuple(sorted(set(scopes)))
        now = self._clock()
        cached = self._tokens.get(key)
        if cached is not None and not fresh and cached[1] > now:
            return "Bearer " + cached[0]
        token, lifetime = self._fetch(challenge, key, self.credentials())
        with self._lock:
            self._tokens[key] = (token, now + max(lifetime - 10.0, lifetime / 2))
        return "Bearer " + token


def env_variable_names(host: str) -> tuple[str, str]:
    """The per-host user and password variable names for `host` (`host:port`)."""
    return REGISTRY_HOST_USER.member(host), REGISTRY_HOST_PASSWORD.member(host)


def docker_config_path(environ: Mapping[str, str]) -> Path:
    """Where docker keeps `config.json`: `$DOCKER_CONFIG`, else `~/.docker`."""
    if environ.get("DOCKER_CONFIG"):
        return Path(environ["DOCKER_CONFIG"]) / "config.json"
    home = environ.get("HOME") or str(Path.home())
    return Path(home) / ".docker" / "config.json"


def find_credentials(
    host: str, *, environ: Mapping[str, str] | None = None, use_global: bool = True
) -> Credentials | None:
    """Credentials for `host` from the environment or docker's config.json, or None.

    `use_global=False` (a registry shipyard only pulls from, e.g. a base image's)
    skips `SHIPYARD_REGISTRY_USER`/`_PASSWORD`: only what is configured for `host`
    itself is used, else the registry is used anonymously.
    """
    env = os.environ if environ is None else environ
    pairs = [env_variable_names(host)]
    if use_global:
        pairs.append(_GLOBAL_VARIABLES)
    for user_var, password_var in pairs:
        user, password = env.get(user_var), env.get(password_var)
        if user is None and password is None:
            continue
        if not user or not password:
            missing = password_var if user else user_var
            raise UsageError(f"{missing} is not set (or empty) while its pair is; set both")
        return Credentials(user, password, source=f"${user_var} and ${password_var}")
    return _from_docker_config(host, env)


_GLOBAL_VARIABLES = (REGISTRY_USER.name, REGISTRY_PASSWORD.name)


def _host_of(key: str) -> str:
    key = re.sub(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", "", key.strip())
    return key.split("/", 1)[0].rpartition("@")[2].lower()  # without any user:password@


def _from_docker_config(host: str, env: Mapping[str, str]) -> Credentials | None:
    path = docker_config_path(env)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read docker config: {exc.__class__.__name__}") from exc
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{path}:{exc.lineno}:{exc.colno}: docker config is not valid JSON; "
            "fix it or point $DOCKER_CONFIG at another folder"
        ) from None
    if not isinstance(config, dict):
        raise UsageError(f"{path}: docker config is not a JSON object")
    wanted = host.lower()
    helpers = config.get("credHelpers") or {}
    for key, helper in helpers.items() if isinstance(helpers, dict) else ():
        if _host_of(key) == wanted and isinstance(helper, str):
            return _from_helper(helper, key, path, redact(f"credHelpers[{key!r}]"), env)
    store = config.get("credsStore")
    if isinstance(store, str) and store:
        found = _from_helper(store, host, path, "credsStore", env)
        if found is not None:
            return found
    auths = config.get("auths") or {}
    for key, entry in auths.items() if isinstance(auths, dict) else ():
        if _host_of(key) == wanted and isinstance(entry, dict):
            found = _from_auth_entry(entry, redact(f"{path}: auths[{key!r}]"))
            if found is not None:
                return found
    return None


def _from_auth_entry(entry: dict[str, Any], where: str) -> Credentials | None:
    token = entry.get("identitytoken")
    user, password = entry.get("username"), entry.get("password")
    encoded = entry.get("auth")
    if isinstance(encoded, str) and encoded:
        try:
            decoded = base64.b64decode(encoded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise UsageError(f"{where}.auth is not base64 of 'user:password'") from None
        user, sep, password = decoded.partition(":")
        if not sep:
            raise UsageError(f"{where}.auth does not decode to 'user:password'")
    if isinstance(token, str) and token:
        return Credentials(str(user or ""), "", identity_token=token, source=where)
    if isinstance(user, str) and isinstance(password, str) and user and password:
        return Credentials(user, password, source=where)
    return None


def _from_helper(
    name: str, server: str, config: Path, key: str, env: Mapping[str, str]
) -> Credentials | None:
    where = f"{config}: {key}"
    if not _HELPER_NAME.fullmatch(name):
        raise UsageError(f"{where}: {name!r} is not a credential helper name")
    program = f"docker-credential-{name}"
    executable = shutil.which(program, path=env.get("PATH", os.defpath))
    if executable is None:
        raise UsageError(
            f"{where} names {program}, which is not on PATH; install it or remove {key}"
        )
    try:
        done = subprocess.run(
            [executable, "get"],
            input=server,
            capture_output=True,
            text=True,
            timeout=_HELPER_TIMEOUT,
            check=False,
            env=dict(env),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"{where}: {program} get failed: {exc.__class__.__name__}") from None
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip()
        if "credentials not found" in said.lower():
            return None
        # Only what it wrote to stderr, and not even that when it looks like an answer:
        # a helper that fails after printing the secret must not have it echoed.
        lines = done.stderr.strip().splitlines()
        first = lines[0][:200] if lines else "no message on stderr"
        if "secret" in first.lower() or "{" in first:
            first = "(its message is withheld: it may hold the secret)"
        raise UsageError(
            f"{where}: {program} get {redact(server)} exited {done.returncode}: {redact(first)}"
        )
    try:
        answer = json.loads(done.stdout)
        user, secret = answer["Username"], answer["Secret"]
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"{where}: {program} get {server} did not print valid JSON") from None
    if not isinstance(user, str) or not isinstance(secret, str) or not secret:
        return None
    source = f"{program} ({where})"
    if user == "<token>":
        return Credentials("", "", identity_token=secret, source=source)
    return Credentials(user, secret, source=source)
