"""What a hostile registry names gets no credentials, no unverified TLS, no endless upload
(found by a security review of issue 12's fixes; each pinned).

- F1: a URL the registry names whose host part two parsers read differently
  (`http://OTHER\\@HUB/...`: urllib3 connects to OTHER, urlsplit says HUB) used to
  get the hub's credentials and pass the plain-HTTP check; it is now refused
  (`UnsafeURL`, exit 2) before any connection, as an upload Location, a redirect,
  a `Link: next` page and a token realm, and so is a `user@` a server names.
- F2: an insecure registry used to switch TLS verification off for every other
  host, its token realm included; other hosts are now verified.
- F6: a registry that kept "losing" stored chunks kept a chunked upload going
  forever; the blob now has one budget, renewed only by new progress, and one
  time cap.
- A 307/308 to another origin no longer re-sends a body (a refresh token) there.

Fake servers listen on 127.0.0.1-3 only; a host off loopback is never dialled
(`lookups` fails any name lookup off loopback and records it).
"""

from __future__ import annotations

import hashlib
import json
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shipyard._http.errors import UnsafeURL
from shipyard._http.retry import RetryPolicy
from shipyard._http.transport import Client
from shipyard.oci.remote.registry import CertificateError, Registry, RegistryError
from tests.integration.registries import make_certificates
from tests.loopback import serving
from tests.reliability import record
from tests.unit.oci.remote.test_transport_credential_scope import (
    DATA,
    DIGEST,
    SECRET,
    Host,
    Reply,
    Seen,
    _serve,
    basic_protected,
    bearer_protected,
    blob_file,
    client,
    leaked,
    lookups,
    responder,
    token,
)

__all__ = ["lookups"]  # the fixture, imported for pytest

FAR = "storage.example.invalid:8080"  # off loopback: must never be looked up


@pytest.fixture
def hub() -> Iterator[Host]:
    """The registry the credentials belong to."""
    yield from _serve(Host("127.0.0.2"))


@pytest.fixture
def other() -> Iterator[Host]:
    """Another host, named through a backslash: it records what it gets."""
    yield from _serve(Host("127.0.0.3"))


def _tricky(target: str, hub: Host, path: str) -> str:
    """`http://TARGET\\@HUB/path`: host TARGET to requests/urllib3, HUB to urlsplit."""
    return f"http://{target}\\@{hub.netloc}{path}"


# -- F1: the host of a URL is the one requests connects to ------------------------------


@pytest.mark.parametrize("scheme", ["basic", "bearer"])
def test_backslash_upload_location_gets_no_credentials(
    hub: Host, other: Host, tmp_path: Path, scheme: str
) -> None:
    protect = basic_protected if scheme == "basic" else (lambda ok: bearer_protected(hub, ok))
    hub.route("GET", "/token", token)
    hub.route("HEAD", f"/v2/app/blobs/{DIGEST}", protect((404, {}, b"")))
    location = {"Location": _tricky(other.netloc, hub, "/up/1")}
    hub.route("POST", "/v2/app/blobs/uploads/", protect((202, location, b"")))
    other.route("PUT", "/up/1", (201, {}, b""))
    with pytest.raises(UnsafeURL) as caught:
        client(hub).push_blob("app", DIGEST, len(DATA), blob_file(tmp_path))
    assert caught.value.exit_code == 2 and SECRET not in str(caught.value)
    assert other.netloc in str(caught.value) and "nothing was sent" in str(caught.value)
    assert other.seen == [] and leaked(other) == []


def test_backslash_redirect_and_link_page_get_no_credentials(
    hub: Host, other: Host, tmp_path: Path
) -> None:
    redirect = {"Location": _tricky(other.netloc, hub, "/storage/blob")}
    hub.route("GET", f"/v2/app/blobs/{DIGEST}", basic_protected((307, redirect, b"")))
    link = {"Link": f'<{_tricky(other.netloc, hub, "/v2/app/tags/list?last=a")}>; rel="next"'}
    hub.route("GET", "/v2/app/tags/list", basic_protected((200, link, b'{"tags": ["a"]}')))
    other.route("GET", "/storage/blob", (200, {}, DATA))
    other.route("GET", "/v2/app/tags/list", (200, {}, b'{"tags": ["b"]}'))
    registry = client(hub)
    with pytest.raises(UnsafeURL):
        registry.pull_blob("app", DIGEST, tmp_path / "p", size=len(DATA))
    with pytest.raises(UnsafeURL):
        registry.tags("app")
    assert other.seen == [] and hub.authorizations(), "the hub itself got its credentials"


def test_backslash_token_realm_gets_no_password(hub: Host, other: Host) -> None:
    realm = _tricky(other.netloc, hub, "/token")
    challenge = f'Bearer realm="{realm}",service="hub"'
    hub.route("GET", "/v2/app/manifests/v1", (401, {"WWW-Authenticate": challenge}, b""))
    other.route("GET", "/token", (200, {}, b'{"token": "t"}'))
    with pytest.raises(UnsafeURL) as caught:
        client(hub).get_manifest("app", "v1")
    assert caught.value.exit_code == 2
    assert other.seen == [], "the realm's real host never got the Basic password"


def test_backslash_plain_http_off_loopback_is_refused_before_any_lookup(
    hub: Host, tmp_path: Path, lookups: list[str]
) -> None:
    location = {"Location": _tricky(FAR, hub, "/up/1")}
    hub.route("HEAD", f"/v2/app/blobs/{DIGEST}", basic_protected((404, {}, b"")))
    hub.route("POST", "/v2/app/blobs/uploads/", basic_protected((202, location, b"")))
    challenge = f'Bearer realm="{_tricky(FAR, hub, "/token")}"'
    hub.route("GET", "/v2/app/manifests/v1", (401, {"WWW-Authenticate": challenge}, b""))
    registry = client(hub)
    with pytest.raises(UnsafeURL):
        registry.push_blob("app", DIGEST, len(DATA), blob_file(tmp_path))
    with pytest.raises(UnsafeURL):
        registry.get_manifest("app", "v1")
    assert lookups == [], "refused before any lookup or connection"


def test_user_name_in_a_url_the_registry_names_is_refused(
    hub: Host, other: Host, tmp_path: Path
) -> None:
    location = {"Location": f"http://someone:pw@{other.netloc}/up/1"}
    hub.route("HEAD", f"/v2/app/blobs/{DIGEST}", (404, {}, b""))
    hub.route("POST", "/v2/app/blobs/uploads/", (202, location, b""))
    other.route("PUT", "/up/1", (201, {}, b""))
    with pytest.raises(UnsafeURL, match="user name"):
        client(hub).push_blob("app", DIGEST, len(DATA), blob_file(tmp_path))
    assert other.seen == []


def _script_ambiguous(hub: Host, scheme: str, target: str) -> None:
    """The hub asks for `scheme` auth, then names `http://TARGET\\@HUB/` URLs everywhere."""
    hub.routes.clear()
    hub.route("GET", "/token", token)

    def protect(ok: Reply) -> Callable[[Seen], Reply]:
        return basic_protected(ok) if scheme == "basic" else bearer_protected(hub, ok)

    url = _tricky(target, hub, "/up/1")
    link = {"Link": f'<{_tricky(target, hub, "/v2/app/tags/list")}>; rel="next"'}
    hub.route("GET", "/v2/app/tags/list", protect((200, link, b'{"tags": ["a"]}')))
    hub.route("HEAD", f"/v2/app/blobs/{DIGEST}", protect((404, {}, b"")))
    hub.route("POST", "/v2/app/blobs/uploads/", protect((202, {"Location": url}, b"")))
    hub.route("GET", f"/v2/app/blobs/{DIGEST}", protect((307, {"Location": url}, b"")))
    realm = f'Bearer realm="{_tricky(target, hub, "/token")}"'
    hub.route("GET", "/v2/app/manifests/v1", (401, {"WWW-Authenticate": realm}, b""))


ATTACKS: tuple[Callable[[Registry, Path], object], ...] = (
    lambda r, _t: r.tags("app"),
    lambda r, t: r.push_blob("app", DIGEST, len(DATA), blob_file(t)),
    lambda r, t: r.pull_blob("app", DIGEST, t / "p", size=len(DATA)),
    lambda r, _t: r.check_push("app"),
    lambda r, _t: r.get_manifest("app", "v1"),
)


@pytest.mark.reliability
def test_ambiguous_urls_a_hostile_registry_names_never_carry_credentials(
    hub: Host, other: Host, tmp_path: Path, lookups: list[str]
) -> None:
    """Every kind of server-named URL, written so that the two parsers disagree."""
    attacks = refused = 0
    for scheme in ("basic", "bearer"):
        for target in (other.netloc, FAR):
            _script_ambiguous(hub, scheme, target)
            registry = client(hub)
            for attack in ATTACKS:
                attacks += 1
                try:
                    attack(registry, tmp_path)
                except UnsafeURL as exc:
                    refused += exc.exit_code == 2 and SECRET not in str(exc)
    # check_push gives up cancelling an upload it cannot reach: nothing sent, no error.
    assert attacks == 20 and refused == 16
    assert other.seen == [] and lookups == []
    record(
        "URLs whose host two parsers read differently",
        area="credentials",
        cases=attacks,
        injected="a registry on 127.0.0.2 (basic and bearer auth) naming http://OTHER\\@HUB/ "
        "URLs (requests connects to OTHER, urlsplit reads HUB) as a Link page, an upload "
        "Location, a blob redirect, an upload to cancel and a token realm, with OTHER another "
        "loopback host or a plain-HTTP host off loopback",
        result=f"{attacks} attacks: {refused} refused before any connection (exit 2), 0 "
        "requests to the other host, 0 lookups of the host off loopback",
        figures={"attacks": attacks, "refused": refused, "leaks": len(other.seen)},
    )


# -- 307/308 with a body to another origin -----------------------------------------------


def test_a_refresh_token_post_is_not_sent_again_to_another_host(
    hub: Host, other: Host, tmp_path: Path
) -> None:
    config = {"auths": {hub.netloc: {"identitytoken": "refresh-" + SECRET}}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    challenge = f'Bearer realm="{hub.url}/token",service="hub"'
    hub.route("GET", "/v2/app/manifests/v1", (401, {"WWW-Authenticate": challenge}, b""))
    hub.route("POST", "/token", (307, {"Location": f"{other.url}/token"}, b""))
    other.route("POST", "/token", (200, {}, b'{"token": "t"}'))
    registry = Registry(hub.url, environ={"DOCKER_CONFIG": str(tmp_path)}, timeout=(5.0, 5.0))
    with pytest.raises(UnsafeURL) as caught:
        registry.get_manifest("app", "v1")
    message = str(caught.value)
    assert hub.netloc in message and other.netloc in message and SECRET not in message
    assert caught.value.exit_code == 2 and other.seen == []
    assert [s.method for s in hub.seen] == ["GET", "POST"], "refused, not retried"


def test_a_307_with_a_body_on_the_same_origin_is_still_followed(hub: Host) -> None:
    hub.route("PUT", "/a", (307, {"Location": "/b"}, b""))
    hub.route("PUT", "/b", (201, {}, b""))
    with Client(hub.netloc) as http:
        resp = http.exchange("PUT", f"{hub.url}/a", "put", body=lambda: b"x")
    assert resp.status_code == 201 and [s.path for s in hub.seen] == ["/a", "/b"]


# -- F2: insecure is the registry's own host only ----------------------------------------


@pytest.fixture
def tls_realm(tmp_path: Path) -> Iterator[tuple[Host, Path]]:
    """An HTTPS token service on 127.0.0.1 whose CA nobody trusts by default."""
    ca, cert, key = make_certificates(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    host = Host("127.0.0.1")
    body = b'{"token": "hub-token", "expires_in": 300}'
    host.route("GET", "/token", (200, {}, body))
    with serving(host.address, responder(host), tls=context) as port:
        host.port = port
        yield host, ca


def test_insecure_registry_keeps_tls_verification_for_its_token_realm(
    hub: Host, tls_realm: tuple[Host, Path]
) -> None:
    realm, ca = tls_realm
    challenge = f'Bearer realm="https://{realm.netloc}/token",service="hub"'
    manifest: Reply = (200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, b"{}")

    def answer(seen: Seen) -> Reply:
        if seen.headers.get("authorization") == "Bearer hub-token":
            return manifest
        return 401, {"WWW-Authenticate": challenge}, b""

    hub.route("GET", "/v2/app/manifests/v1", answer)
    insecure = {"SHIPYARD_INSECURE_REGISTRIES": hub.netloc}
    with pytest.raises(CertificateError) as caught:
        client(hub, **insecure).get_manifest("app", "v1")
    message = str(caught.value)
    assert realm.netloc in message and "SHIPYARD_REGISTRY_127_0_0_1_" in message
    assert caught.value.exit_code == 2 and SECRET not in message
    assert realm.seen == [], "no request (and no password) over unverified TLS"
    # With the realm's own CA configured, the same pull works.
    ca_variable = f"SHIPYARD_REGISTRY_127_0_0_1_{realm.port}_CA_FILE"
    assert client(hub, **insecure, **{ca_variable: str(ca)}).get_manifest("app", "v1")[0] == b"{}"
    assert len(realm.seen) == 1 and "authorization" in realm.seen[0].headers


# -- F6: one retry budget per blob, renewed only by progress -------------------------------


class _Clock:
    """A fake clock that the policy's sleeps move forward."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _chunk_blob(tmp_path: Path, size: int) -> tuple[Path, str]:
    data = b"x" * size
    path = tmp_path / "chunked"
    path.write_bytes(data)
    return path, "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.mark.reliability
def test_registry_that_loses_stored_chunks_cannot_keep_an_upload_going(
    hub: Host, tmp_path: Path
) -> None:
    """loop.py: a chunk stored, the next refused, then "I hold 2 bytes", for ever."""
    path, digest = _chunk_blob(tmp_path, 12)
    patches: list[str] = []

    def patch(seen: Seen) -> Reply:
        patches.append(seen.headers["content-range"])
        if len(patches) > 300:
            return 400, {}, b"{}"  # the old code's loop, stopped for the test
        start, end = (int(n) for n in seen.headers["content-range"].split("-"))
        if start in (0, 2):
            return 202, {"Range": f"0-{end}", "Location": "/up/u"}, b""
        return 503, {}, b""

    hub.route("HEAD", f"/v2/app/blobs/{digest}", (404, {}, b""))
    hub.route("POST", "/v2/app/blobs/uploads/", (202, {"Location": "/up/u"}, b""))
    hub.route("GET", "/up/u", (204, {"Range": "0-1", "Location": "/up/u"}, b""))
    hub.route("PATCH", "/up/u", patch)
    clock = _Clock()
    policy = RetryPolicy(sleep=clock.sleep, clock=clock)
    registry = Registry(hub.url, environ={"DOCKER_CONFIG": "/nonexistent"}, retry=policy)
    with pytest.raises(RegistryError, match="gave up after") as caught:
        registry.push_blob("app", digest, 12, path, chunk_size=4)
    assert "holds 2 bytes after confirming" in str(caught.value)
    assert len(patches) <= 2 * policy.attempts, patches
    assert clock.now <= policy.deadline
    record(
        "chunked upload against a registry that loses stored chunks",
        area="retry budget",
        cases=1,
        injected="a registry that stores a chunk, refuses the next (503) and then says it "
        "holds 2 bytes, for ever (12-byte blob, 4-byte chunks)",
        result=f"the upload ended after {len(patches)} PATCH requests and "
        f"{registry.stats.retries} retries (the old code: unbounded)",
        figures={"patches": len(patches), "retries": registry.stats.retries},
    )


def test_one_time_cap_per_blob_even_when_every_chunk_needs_a_retry(
    hub: Host, tmp_path: Path
) -> None:
    """Each chunk after the first goes in on its second try: progress renews attempts only."""
    path, digest = _chunk_blob(tmp_path, 40)
    tried: set[str] = set()
    held = [0]

    def patch(seen: Seen) -> Reply:
        span = seen.headers["content-range"]
        start, end = (int(n) for n in span.split("-"))
        if start and span not in tried:
            tried.add(span)
            return 503, {}, b""
        held[0] = end + 1
        return 202, {"Range": f"0-{end}", "Location": "/up/u"}, b""

    def status(seen: Seen) -> Reply:
        return 204, {"Range": f"0-{held[0] - 1}", "Location": "/up/u"}, b""

    hub.route("HEAD", f"/v2/app/blobs/{digest}", (404, {}, b""))
    hub.route("POST", "/v2/app/blobs/uploads/", (202, {"Location": "/up/u"}, b""))
    hub.route("GET", "/up/u", status)
    hub.route("PATCH", "/up/u", patch)
    hub.route("PUT", "/up/u", (201, {}, b""))
    clock = _Clock()
    policy = RetryPolicy(
        base_delay=1.0, max_delay=1.0, deadline=10.0, sleep=clock.sleep, clock=clock
    )
    registry = Registry(hub.url, environ={"DOCKER_CONFIG": "/nonexistent"}, retry=policy)
    with pytest.raises(RegistryError, match="gave up after"):
        registry.push_blob("app", digest, 40, path, chunk_size=2)
    assert clock.now <= policy.deadline and len(tried) < 20
