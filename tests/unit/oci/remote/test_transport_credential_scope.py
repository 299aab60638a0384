"""Credentials stay with their registry: a hostile registry cannot send them elsewhere.

A scripted registry on 127.0.0.2 asks for credentials (basic or bearer) and then
names URLs on another host, 127.0.0.3, which records every header it receives: an
upload `Location`, a `Link: next` page, a redirect of a blob download to
"storage", a cancel of an upload, a basic challenge of its own. The client must
follow those URLs without the registry's credentials and never answer the other
host's challenge. Plain HTTP to a host off loopback is refused whatever URL the
registry names, before any lookup. The global SHIPYARD_REGISTRY_USER pair is not
used for a registry that is only pulled from (`global_credentials=False`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from shipyard._http.retry import RetryPolicy
from shipyard._http.transport import PlainHTTPRefused
from shipyard.errors import UsageError
from shipyard.oci.remote.auth import find_credentials
from shipyard.oci.remote.registry import AuthError, Registry
from tests.loopback import Request, read_request, send_reply, serving
from tests.reliability import record

SECRET = "hub-secret-d41d8cd98f00b204"
GLOBAL = "global-secret-9e107d9d372bb682"
USER = "ci"
DATA = b"layer bytes " * 100
DIGEST = "sha256:" + hashlib.sha256(DATA).hexdigest()

Reply = tuple[int, dict[str, str], bytes]


Seen = Request  # one request a fake host received


@dataclass
class Host:
    """An HTTP server on one loopback address with scripted answers per (method, path)."""

    address: str
    routes: dict[tuple[str, str], Callable[[Seen], Reply]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    port: int = 0

    @property
    def netloc(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.netloc}"

    def route(self, method: str, path: str, answer: Callable[[Seen], Reply] | Reply) -> None:
        if callable(answer):
            self.routes[(method, path)] = answer
        else:
            reply: Reply = answer
            self.routes[(method, path)] = lambda _seen: reply

    def authorizations(self) -> list[str]:
        return [s.headers["authorization"] for s in self.seen if "authorization" in s.headers]


def responder(host: Host) -> Callable[[BaseHTTPRequestHandler], None]:
    """Record each request in `host.seen` and answer from its routes (else 404)."""

    def respond(handler: BaseHTTPRequestHandler) -> None:
        seen = read_request(handler)
        host.seen.append(seen)
        answer = host.routes.get((seen.method, seen.path))
        send_reply(handler, *(answer(seen) if answer else (404, {}, b"{}")))

    return respond


def _serve(host: Host) -> Iterator[Host]:
    with serving(host.address, responder(host)) as port:
        host.port = port
        yield host


@pytest.fixture
def hub() -> Iterator[Host]:
    """The registry the credentials belong to."""
    yield from _serve(Host("127.0.0.2"))


@pytest.fixture
def other() -> Iterator[Host]:
    """Another host the registry names: it records what it gets."""
    yield from _serve(Host("127.0.0.3"))


BASIC = "Basic " + base64.b64encode(f"{USER}:{SECRET}".encode()).decode()


def basic_protected(ok: Reply | Callable[[Seen], Reply]) -> Callable[[Seen], Reply]:
    """An answer that wants the hub's basic credentials first."""

    def answer(seen: Seen) -> Reply:
        if seen.headers.get("authorization") != BASIC:
            return 401, {"WWW-Authenticate": 'Basic realm="hub"'}, b"{}"
        return ok(seen) if callable(ok) else ok

    return answer


def bearer_protected(hub: Host, ok: Reply | Callable[[Seen], Reply]) -> Callable[[Seen], Reply]:
    """An answer that wants a bearer token from the hub's own token endpoint."""

    def answer(seen: Seen) -> Reply:
        if seen.headers.get("authorization") != "Bearer hub-token":
            challenge = f'Bearer realm="{hub.url}/token",service="hub",scope="repository:app:pull"'
            return 401, {"WWW-Authenticate": challenge}, b"{}"
        return ok(seen) if callable(ok) else ok

    return answer


def token(seen: Seen) -> Reply:
    if seen.headers.get("authorization") != BASIC:
        return 401, {}, b"{}"
    return 200, {}, b'{"token": "hub-token", "expires_in": 300}'


def client(hub: Host, **env: str) -> Registry:
    user_var = "SHIPYARD_REGISTRY_" + hub.netloc.replace(".", "_").replace(":", "_")
    environ = {
        "DOCKER_CONFIG": "/nonexistent",
        f"{user_var}_USER": USER,
        f"{user_var}_PASSWORD": SECRET,
        **env,
    }
    policy = RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.01, sleep=lambda _: None)
    return Registry(hub.url, environ=environ, retry=policy, timeout=(5.0, 5.0))


def leaked(*hosts: Host) -> list[str]:
    """Every header value that carries the hub's credentials or token, on these hosts."""
    found = []
    for host in hosts:
        for seen in host.seen:
            for value in seen.headers.values():
                if SECRET in value or BASIC in value or "hub-token" in value or GLOBAL in value:
                    found.append(f"{host.address} {seen.method} {seen.path}")
    return found


def blob_file(tmp_path: Path) -> Path:
    path = tmp_path / "blob"
    path.write_bytes(DATA)
    return path


@pytest.mark.parametrize("scheme", ["basic", "bearer"])
def test_upload_location_on_another_host_is_followed_without_credentials(
    hub: Host, other: Host, tmp_path: Path, scheme: str
) -> None:
    protect: Callable[[Reply], Callable[[Seen], Reply]]
    protect = basic_protected if scheme == "basic" else (lambda ok: bearer_protected(hub, ok))
    hub.route("GET", "/token", token)
    hub.route("HEAD", f"/v2/app/blobs/{DIGEST}", protect((404, {}, b"")))
    hub.route(
        "POST", "/v2/app/blobs/uploads/", protect((202, {"Location": f"{other.url}/up/1"}, b""))
    )
    other.route("PUT", "/up/1", (201, {}, b""))
    registry = client(hub)
    assert registry.push_blob("app", DIGEST, len(DATA), blob_file(tmp_path)) is True
    assert [s.method for s in other.seen] == ["PUT"]
    assert other.authorizations() == [] and leaked(other) == []
    assert hub.authorizations(), "the hub itself did get its credentials"


def test_another_hosts_basic_challenge_is_not_answered(
    hub: Host, other: Host, tmp_path: Path
) -> None:
    hub.route("HEAD", f"/v2/app/blobs/{DIGEST}", basic_protected((404, {}, b"")))
    location = {"Location": f"{other.url}/up/1"}
    hub.route("POST", "/v2/app/blobs/uploads/", basic_protected((202, location, b"")))
    other.route("PUT", "/up/1", (401, {"WWW-Authenticate": 'Basic realm="give me"'}, b""))
    other.route("GET", "/up/1", (401, {"WWW-Authenticate": 'Basic realm="give me"'}, b""))
    registry = client(hub)
    with pytest.raises(AuthError) as caught:
        registry.push_blob("app", DIGEST, len(DATA), blob_file(tmp_path))
    assert caught.value.exit_code == 2
    assert other.netloc in str(caught.value) and "never to another host" in str(caught.value)
    assert SECRET not in str(caught.value)
    assert other.seen and other.authorizations() == []


def test_link_next_page_on_another_host_gets_no_credentials(hub: Host, other: Host) -> None:
    link = {"Link": f'<{other.url}/v2/app/tags/list?last=a>; rel="next"'}
    hub.route("GET", "/v2/app/tags/list", basic_protected((200, link, b'{"tags": ["a"]}')))
    other.route("GET", "/v2/app/tags/list", (200, {}, b'{"tags": ["b"]}'))
    assert client(hub).tags("app") == ["a", "b"]
    assert len(other.seen) == 1 and other.authorizations() == []


def test_cancelled_upload_on_another_host_gets_no_credentials(hub: Host, other: Host) -> None:
    location = {"Location": f"{other.url}/up/9"}
    hub.route("POST", "/v2/app/blobs/uploads/", basic_protected((202, location, b"")))
    other.route("DELETE", "/up/9", (204, {}, b""))
    client(hub).check_push("app")
    assert [s.method for s in other.seen] == ["DELETE"] and other.authorizations() == []


@pytest.mark.parametrize("where", ["other host", "same host, other port"])
def test_blob_redirected_to_storage_is_fetched_without_credentials(
    hub: Host, other: Host, tmp_path: Path, where: str
) -> None:
    storage = other if where == "other host" else None
    with _maybe_second_port(hub, storage) as target:
        redirect = {"Location": f"{target.url}/storage/blob?sig=x"}
        hub.route("GET", f"/v2/app/blobs/{DIGEST}", basic_protected((307, redirect, b"")))
        target.route("GET", "/storage/blob", (200, {}, DATA))
        dest = tmp_path / "pulled"
        assert client(hub).pull_blob("app", DIGEST, dest, size=len(DATA)) == len(DATA)
        assert dest.read_bytes() == DATA
        assert len(target.seen) == 1 and target.authorizations() == []
        assert target.seen[0].query == {"sig": ["x"]}


class _maybe_second_port:
    """`storage` itself, or a second server on the hub's address (another port)."""

    def __init__(self, hub: Host, storage: Host | None) -> None:
        self._storage, self._hub = storage, hub
        self._gen: Iterator[Host] | None = None

    def __enter__(self) -> Host:
        if self._storage is not None:
            return self._storage
        self._gen = _serve(Host(self._hub.address))
        return next(self._gen)

    def __exit__(self, *exc: object) -> None:
        if self._gen is not None:
            next(self._gen, None)


def test_redirect_on_the_same_origin_keeps_credentials(hub: Host, tmp_path: Path) -> None:
    redirect = {"Location": "/storage/blob"}
    hub.route("GET", f"/v2/app/blobs/{DIGEST}", basic_protected((307, redirect, b"")))
    hub.route("GET", "/storage/blob", basic_protected((200, {}, DATA)))
    assert client(hub).pull_blob("app", DIGEST, tmp_path / "b", size=len(DATA)) == len(DATA)


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names looked up off loopback; such a lookup fails the test's request."""
    seen: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if str(host) not in ("127.0.0.2", "127.0.0.3", "localhost", "127.0.0.1"):
            seen.append(str(host))
            raise socket.gaierror(f"test: no lookup of {host}")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return seen


def test_plain_http_off_loopback_named_by_the_registry_is_refused(
    hub: Host, tmp_path: Path, lookups: list[str]
) -> None:
    far = "http://storage.example.invalid:8080"
    hub.route("HEAD", f"/v2/app/blobs/{DIGEST}", basic_protected((404, {}, b"")))
    hub.route("POST", "/v2/app/blobs/uploads/", basic_protected((202, {"Location": far}, b"")))
    hub.route("GET", f"/v2/app/blobs/{DIGEST}", (307, {"Location": f"{far}/b"}, b""))
    link = {"Link": f'<{far}/v2/app/tags/list?last=a>; rel="next"'}
    hub.route("GET", "/v2/app/tags/list", (200, link, b'{"tags": ["a"]}'))
    realm = f'Bearer realm="{far}/token",service="hub"'
    hub.route("GET", "/v2/app/manifests/v1", (401, {"WWW-Authenticate": realm}, b""))
    registry = client(hub)
    attempts: list[Callable[[], object]] = [
        lambda: registry.push_blob("app", DIGEST, len(DATA), blob_file(tmp_path)),
        lambda: registry.pull_blob("app", DIGEST, tmp_path / "p", size=len(DATA)),
        lambda: registry.tags("app"),
        lambda: registry.get_manifest("app", "v1"),
    ]
    for attempt in attempts:
        with pytest.raises(PlainHTTPRefused) as caught:
            attempt()
        assert caught.value.exit_code == 2
        message = str(caught.value)
        assert "storage.example.invalid:8080" in message
        assert "SHIPYARD_INSECURE_REGISTRIES" in message and SECRET not in message
    assert lookups == [], "refused before any lookup or connection"
    # Listed as insecure, the host is dialled (and here fails to resolve): not refused.
    allowed = client(hub, SHIPYARD_INSECURE_REGISTRIES="storage.example.invalid:8080")
    with pytest.raises(Exception) as dialled:
        allowed.tags("app")
    assert not isinstance(dialled.value, PlainHTTPRefused)
    assert lookups and set(lookups) == {"storage.example.invalid"}


def test_too_many_redirects_end(hub: Host) -> None:
    hub.route("GET", "/v2/app/tags/list", (302, {"Location": "/v2/app/tags/list"}, b""))
    with pytest.raises(Exception, match="redirects"):
        client(hub).tags("app")


def test_global_pair_is_not_used_for_a_pull_only_registry(tmp_path: Path) -> None:
    host = "127.0.0.2:5000"
    env = {
        "DOCKER_CONFIG": str(tmp_path),
        "SHIPYARD_REGISTRY_USER": USER,
        "SHIPYARD_REGISTRY_PASSWORD": GLOBAL,
    }
    assert find_credentials(host, environ=env) is not None  # a push target: used
    assert find_credentials(host, environ=env, use_global=False) is None
    # A half-set global pair does not matter where the pair is not used.
    assert find_credentials(host, environ={"SHIPYARD_REGISTRY_USER": "x"}, use_global=False) is None
    with pytest.raises(UsageError):
        find_credentials(host, environ={"SHIPYARD_REGISTRY_USER": "x"})
    # What is configured for the host itself still is.
    per_host = {**env, "SHIPYARD_REGISTRY_127_0_0_2_5000_USER": "u"}
    per_host["SHIPYARD_REGISTRY_127_0_0_2_5000_PASSWORD"] = "p"
    found = find_credentials(host, environ=per_host, use_global=False)
    assert found is not None and found.password == "p"
    auth = base64.b64encode(b"cfg:cfgpass").decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    found = find_credentials(host, environ=env, use_global=False)
    assert found is not None and found.password == "cfgpass"


def test_pull_only_client_asks_for_an_anonymous_token(hub: Host) -> None:
    tokens: list[Seen] = []

    def anonymous_token(seen: Seen) -> Reply:
        tokens.append(seen)
        if "authorization" in seen.headers:
            return 401, {}, b'{"details": "unknown account"}'  # as a public hub answers
        return 200, {}, b'{"token": "anon", "expires_in": 300}'

    hub.route("GET", "/token", anonymous_token)

    def manifest(seen: Seen) -> Reply:
        if seen.headers.get("authorization") != "Bearer anon":
            realm = f'Bearer realm="{hub.url}/token",service="hub"'
            return 401, {"WWW-Authenticate": realm}, b"{}"
        return 200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, b"{}"

    hub.route("GET", "/v2/library/base/manifests/1", manifest)
    env = {
        "DOCKER_CONFIG": "/nonexistent",
        "SHIPYARD_REGISTRY_USER": USER,
        "SHIPYARD_REGISTRY_PASSWORD": GLOBAL,
    }
    pulled = Registry(hub.url, environ=env, global_credentials=False)
    assert pulled.get_manifest("library/base", "1")[0] == b"{}"
    assert leaked(hub) == [] and all("authorization" not in s.headers for s in tokens)
    pushed = Registry(hub.url, environ=env)  # a push target does send the pair
    with pytest.raises(AuthError) as caught:
        pushed.get_manifest("library/base", "1")
    assert GLOBAL not in str(caught.value)
    assert any("authorization" in s.headers for s in tokens[1:])


def test_pull_only_auth_error_names_the_per_host_variables(hub: Host) -> None:
    hub.route("GET", "/v2/", (401, {"WWW-Authenticate": 'Basic realm="x"'}, b""))
    env = {"DOCKER_CONFIG": "/nonexistent", "SHIPYARD_REGISTRY_USER": USER}
    env["SHIPYARD_REGISTRY_PASSWORD"] = GLOBAL
    with pytest.raises(AuthError) as caught:
        Registry(hub.url, environ=env, global_credentials=False).ping()
    message = str(caught.value)
    user_var = "SHIPYARD_REGISTRY_" + hub.netloc.replace(".", "_").replace(":", "_") + "_USER"
    assert user_var in message and "only sent to the registries shipyard pushes to" in message
    assert hub.authorizations() == []


def _script_hostile(hub: Host, other: Host, scheme: str, target: str) -> None:
    """The hub asks for `scheme` auth, then names URLs on `target` for every request kind."""
    hub.routes.clear()
    hub.route("GET", "/token", token)

    def protect(ok: Reply) -> Callable[[Seen], Reply]:
        return basic_protected(ok) if scheme == "basic" else bearer_protected(hub, ok)

    link = {"Link": f'<{target}/v2/app/tags/list?last=a>; rel="next"'}
    hub.route("GET", "/v2/app/tags/list", protect((200, link, b'{"tags": ["a"]}')))
    hub.route("HEAD", f"/v2/app/blobs/{DIGEST}", protect((404, {}, b"")))
    upload = {"Location": f"{target}/up/1"}
    hub.route("POST", "/v2/app/blobs/uploads/", protect((202, upload, b"")))
    hub.route("GET", f"/v2/app/blobs/{DIGEST}", protect((307, upload, b"")))
    other.route("GET", "/v2/app/tags/list", (200, {}, b'{"tags": ["b"]}'))
    other.route("PUT", "/up/1", (401, {"WWW-Authenticate": 'Basic realm="x"'}, b""))
    other.route("GET", "/up/1", (200, {}, DATA))
    other.route("DELETE", "/up/1", (204, {}, b""))


ATTACKS: tuple[Callable[[Registry, Path], object], ...] = (
    lambda r, _t: r.tags("app"),
    lambda r, t: r.push_blob("app", DIGEST, len(DATA), blob_file(t)),
    lambda r, t: r.pull_blob("app", DIGEST, t / "p", size=len(DATA)),
    lambda r, _t: r.check_push("app"),
)


@pytest.mark.reliability
def test_every_url_a_hostile_registry_names_gets_no_credentials(
    hub: Host, other: Host, tmp_path: Path, lookups: list[str]
) -> None:
    """Each kind of URL, on another host and as plain HTTP off loopback, under basic and bearer."""
    far = "http://storage.example.invalid:8080"
    attacks = refused = 0
    for scheme in ("basic", "bearer"):
        for target in (other.url, far):
            _script_hostile(hub, other, scheme, target)
            registry = client(hub)
            for attack in ATTACKS:
                attacks += 1
                try:
                    attack(registry, tmp_path)
                except (AuthError, PlainHTTPRefused) as exc:
                    refused += 1
                    assert exc.exit_code == 2 and SECRET not in str(exc)
    leaks_found = len(leaked(other)) + len(lookups)
    assert attacks == 16 and leaks_found == 0
    assert other.seen and other.authorizations() == [] and lookups == []
    record(
        "URLs a hostile registry names",
        area="credentials",
        cases=attacks,
        injected="a registry on 127.0.0.2 (basic and bearer auth) naming a Link page, an upload "
        "Location, a blob redirect and an upload to cancel on 127.0.0.3, which asks for basic "
        "credentials, and the same as plain HTTP to a host off loopback",
        result=f"{attacks} attacks: 0 requests with credentials to the other host, 0 lookups of "
        f"the plain-HTTP host; {refused} refused with a typed error (exit 2), the rest followed "
        "without credentials",
        figures={"attacks": attacks, "leaks": leaks_found, "refused": refused},
    )
