"""Credentials stay with their registry, end to end through the CLI.

A hostile registry on 127.0.0.2 fronts the real registry of the services and
records every `Authorization` header; it hands back URLs on a second host,
127.0.0.3 (which also fronts the real registry and records what it gets): upload
`Location`s, blob downloads redirected to "storage", a basic challenge of its
own. `shipyard push` must upload through those URLs without the hub's password,
and refuse the other host's challenge. A base image pulled from a registry that
gives anonymous tokens (and refuses an unknown account, as a public hub does)
must be pulled anonymously although the global SHIPYARD_REGISTRY_USER pair is set.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from shipyard.oci.remote.registry import Registry
from tests import loopback
from tests.integration._repo import copy_worktree, shipyard
from tests.integration.conftest import Services
from tests.loopback import read_request, send_reply
from tests.reliability import record

pytestmark = [
    pytest.mark.integration,
    pytest.mark.reliability,
    pytest.mark.requires("registry", "base-layout"),
]

RUN = uuid.uuid4().hex[:8]
USER = "ci"
GLOBAL = f"global-{uuid.uuid4().hex}"
BASIC = "Basic " + base64.b64encode(f"{USER}:{GLOBAL}".encode()).decode()
_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "authorization", "te"}


@dataclass(frozen=True)
class Seen:
    """One request a hostile host received."""

    host: str
    method: str
    path: str
    authorization: str | None


@dataclass
class Hostile:
    """A front to the real registry on one loopback address, with a scripted policy.

    `gate(seen)` answers instead of the registry (a challenge), or None to forward;
    `rewrite(status, headers)` changes the registry's answer headers (a Location
    moved to another host). Every request is recorded.
    """

    address: str
    upstream: str
    seen: list[Seen]
    gate: Callable[[Seen, dict[str, list[str]]], tuple[int, dict[str, str], bytes] | None] = (
        lambda _s, _q: None
    )
    rewrite: Callable[[str, str, dict[str, str]], None] = lambda _m, _p, _h: None
    port: int = 0
    _session: requests.Session = field(default_factory=requests.Session)

    @property
    def netloc(self) -> str:
        return f"{self.address}:{self.port}"

    def mine(self) -> list[Seen]:
        return [s for s in self.seen if s.host == self.netloc]


@contextmanager
def serving(host: Hostile) -> Iterator[Hostile]:
    host._session.trust_env = False  # loopback only

    def respond(handler: BaseHTTPRequestHandler) -> None:
        request = read_request(handler)
        seen = Seen(host.netloc, request.method, request.path, handler.headers.get("Authorization"))
        host.seen.append(seen)
        gated = host.gate(seen, request.query)
        if gated is not None:
            send_reply(handler, *gated)
            return
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP}
        with host._session.request(
            request.method,
            f"http://{host.upstream}{handler.path}",
            headers={**headers, "Host": host.netloc},
            data=request.body or None,
            allow_redirects=False,
            timeout=60,
        ) as resp:
            status, payload = resp.status_code, resp.content
            answer = {k: v for k, v in resp.headers.items() if k.lower() not in _HOP}
        answer.pop("Content-Length", None)
        host.rewrite(request.method, request.path, answer)
        send_reply(handler, status, answer, payload)

    try:
        with loopback.serving(host.address, respond) as port:
            host.port = port
            yield host
    finally:
        host._session.close()


def basic_gate(
    seen: Seen, _query: dict[str, list[str]]
) -> tuple[int, dict[str, str], bytes] | None:
    """The hub wants the global pair (it is a push target)."""
    if seen.authorization != BASIC:
        return 401, {"WWW-Authenticate": 'Basic realm="hub"'}, b"{}"
    return None


def move_locations_to(other: Hostile) -> Callable[[str, str, dict[str, str]], None]:
    """Rewrite every upload Location the registry gives to the other host."""

    def rewrite(_method: str, _path: str, headers: dict[str, str]) -> None:
        location = headers.get("Location")
        if location and "/blobs/uploads/" in location:
            parts = urlsplit(location)
            tail = parts.path + (f"?{parts.query}" if parts.query else "")
            headers["Location"] = f"http://{other.netloc}{tail}"

    return rewrite


def leaks(seen: list[Seen], netloc: str) -> list[Seen]:
    """Requests to `netloc` that carried any Authorization, or the secret anywhere."""
    return [s for s in seen if s.host == netloc and s.authorization]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, services: Services) -> Path:
    """A checkout with meshctl's image built for linux/amd64 from the local base layout."""
    root = copy_worktree(tmp_path_factory.mktemp("cred") / "repo")
    env = {"BASE_IMAGE": f"oci-layout:{services.base_layout}"}
    args = ("build", "--binary=meshctl", "--output=image", "--platform=linux/amd64", "--no-cache")
    done = shipyard(root, *args, **env)
    assert done.returncode == 0, done.stderr
    return root


def push_env(tmp_path: Path, hub: str) -> dict[str, str]:
    return {
        "BASE_IMAGE": "oci-layout:unused",
        "HUB": hub,
        "DOCKER_CONFIG": str(tmp_path / "no-docker-config"),
        "SHIPYARD_REGISTRY_USER": USER,
        "SHIPYARD_REGISTRY_PASSWORD": GLOBAL,
    }


def test_push_follows_upload_locations_on_another_host_without_credentials(
    built: Path, services: Services, tmp_path: Path
) -> None:
    seen: list[Seen] = []
    started = time.monotonic()
    with (
        serving(Hostile("127.0.0.3", services.registry, seen)) as other,
        serving(
            Hostile("127.0.0.2", services.registry, seen, basic_gate, move_locations_to(other))
        ) as hub,
    ):
        repo = f"cred-{RUN}"
        pushed = shipyard(
            built,
            "push",
            "--binary=meshctl",
            "--tag=t",
            "--allow-partial",  # built for linux/amd64 only: credentials are the subject
            **push_env(tmp_path, f"{hub.netloc}/{repo}"),
        )
        assert pushed.returncode == 0, pushed.stderr
    uploads = [s for s in other.mine() if s.method in ("PUT", "PATCH")]
    assert uploads, "the hostile hub sent the uploads to the other host"
    assert leaks(seen, other.netloc) == []
    assert any(s.authorization == BASIC for s in hub.mine()), "the hub got its credentials"
    assert GLOBAL not in pushed.stdout + pushed.stderr
    # The image really is in the registry behind both hosts.
    plain = Registry(services.registry, environ={"DOCKER_CONFIG": str(tmp_path / "none")})
    assert plain.manifest_exists(f"{repo}/meshctl", "t")
    record(
        "push through a hostile registry that moves uploads to another host",
        area="credentials",
        cases=len(uploads),
        injected="`shipyard push` with the global SHIPYARD_REGISTRY_USER pair to a registry on "
        "127.0.0.2 that asks for basic auth and hands back every upload Location on 127.0.0.3",
        result=f"the push succeeded; {len(uploads)} uploads went to 127.0.0.3 with 0 "
        "Authorization headers (0 leaks); the hub alone got its credentials",
        figures={
            "attacks": len(uploads),
            "leaks": len(leaks(seen, other.netloc)),
            "seconds": round(time.monotonic() - started, 1),
        },
    )


def test_another_hosts_challenge_during_push_is_refused(
    built: Path, services: Services, tmp_path: Path
) -> None:
    seen: list[Seen] = []

    def challenge(_seen: Seen, _q: dict[str, list[str]]) -> tuple[int, dict[str, str], bytes]:
        return 401, {"WWW-Authenticate": 'Basic realm="give me the hub password"'}, b"{}"

    with (
        serving(Hostile("127.0.0.3", services.registry, seen, challenge)) as other,
        serving(
            Hostile("127.0.0.2", services.registry, seen, basic_gate, move_locations_to(other))
        ) as hub,
    ):
        hub_name = f"{hub.netloc}/cred-challenge-{RUN}"
        pushed = shipyard(
            built,
            "push",
            "--binary=meshctl",
            "--tag=t",
            "--allow-partial",  # built for linux/amd64 only: credentials are the subject
            **push_env(tmp_path, hub_name),
        )
    output = pushed.stdout + pushed.stderr
    assert pushed.returncode == 2, output
    assert other.netloc in pushed.stderr and "never to another host" in pushed.stderr
    assert "Traceback" not in output and GLOBAL not in output
    asked = other.mine()
    assert asked and leaks(seen, other.netloc) == []
    record(
        "another host's basic challenge during a push",
        area="credentials",
        cases=len(asked),
        injected="the hostile hub moves uploads to 127.0.0.3, which answers every request with "
        "a Basic challenge asking for credentials",
        result=f"`shipyard push` exits 2 naming 127.0.0.3; {len(asked)} requests reached it, "
        "0 with credentials (0 leaks)",
        figures={"attacks": len(asked), "leaks": 0},
    )


def test_base_pull_sends_no_global_credentials(services: Services, tmp_path: Path) -> None:
    """A public-hub-like base registry: anonymous tokens, an unknown account refused."""
    seen: list[Seen] = []
    tokens: list[Seen] = []

    def token_service(s: Seen, query: dict[str, list[str]]) -> tuple[int, dict[str, str], bytes]:
        tokens.append(s)
        if s.authorization:
            return 401, {}, b'{"details": "incorrect username or password"}'
        return 200, {}, json.dumps({"token": "anonymous", "expires_in": 300}).encode()

    def hub_gate(s: Seen, _q: dict[str, list[str]]) -> tuple[int, dict[str, str], bytes] | None:
        if s.authorization != "Bearer anonymous":
            realm = f'Bearer realm="http://{other.netloc}/token",service="hub"'
            return 401, {"WWW-Authenticate": realm}, b"{}"
        if s.method == "GET" and "/blobs/" in s.path:  # blobs come from "storage"
            return 307, {"Location": f"http://{other.netloc}{s.path}"}, b""
        return None

    def other_gate(
        s: Seen, query: dict[str, list[str]]
    ) -> tuple[int, dict[str, str], bytes] | None:
        return token_service(s, query) if s.path == "/token" else None

    root = copy_worktree(tmp_path / "repo")
    with (
        serving(Hostile("127.0.0.3", services.registry, seen, other_gate)) as other,
        serving(Hostile("127.0.0.2", services.registry, seen, hub_gate)) as hub,
    ):
        base = services.base_image.replace(services.registry, hub.netloc, 1)
        assert base != services.base_image
        built = shipyard(
            root,
            "build",
            "--binary=meshctl",
            "--output=image",
            "--platform=linux/amd64",
            "--no-cache",
            BASE_IMAGE=base,
            DOCKER_CONFIG=str(tmp_path / "no-docker-config"),
            SHIPYARD_CACHE_DIR=str(tmp_path / "cache"),
            SHIPYARD_REGISTRY_USER=USER,
            SHIPYARD_REGISTRY_PASSWORD=GLOBAL,
        )
    output = built.stdout + built.stderr
    assert built.returncode == 0, output
    assert GLOBAL not in output
    with_credentials = [s for s in seen if s.authorization and s.authorization.startswith("Basic")]
    assert with_credentials == [], "the global pair went to the base registry or its realm"
    storage = [s for s in other.mine() if "/blobs/" in s.path]
    assert tokens and storage, "the token service and the storage redirect were used"
    assert [s for s in storage if s.authorization] == []
    assert hub.mine()
    record(
        "base pull with the global credential pair set",
        area="credentials",
        cases=len(seen),
        injected="a build whose base is on a registry (127.0.0.2) with anonymous bearer tokens "
        "from a realm on 127.0.0.3 that refuses an unknown account, blobs redirected to "
        "127.0.0.3, and SHIPYARD_REGISTRY_USER/_PASSWORD set",
        result=f"the build pulled the base anonymously: {len(seen)} requests "
        f"({len(tokens)} token requests, {len(storage)} redirected blob downloads), 0 with "
        "the global pair or any basic credentials (0 leaks)",
        figures={"attacks": len(seen), "leaks": len(with_credentials)},
    )


def test_verify_of_an_image_sends_no_global_credentials(services: Services, tmp_path: Path) -> None:
    """`shipyard verify IMAGE_REF` only reads: a registry it names may be anyone's, so
    the global SHIPYARD_REGISTRY_USER pair (for the hubs shipyard pushes to) is never
    its answer to a Basic challenge (security issue, second round, item 2). Before the
    fix, verify answered the challenge of 127.0.0.2 with the global pair."""
    from shipyard.release.keys import generate_keypair

    generate_keypair(tmp_path / "k.key", tmp_path / "k.pub")
    seen: list[Seen] = []
    with serving(Hostile("127.0.0.2", services.registry, seen, basic_gate)) as hub:
        done = shipyard(
            tmp_path,
            "verify",
            f"{hub.netloc}/vendor/base:1",
            "--key",
            str(tmp_path / "k.pub"),
            DOCKER_CONFIG=str(tmp_path / "no-docker-config"),
            SHIPYARD_REGISTRY_USER=USER,
            SHIPYARD_REGISTRY_PASSWORD=GLOBAL,
        )
    output = done.stdout + done.stderr
    assert done.returncode == 2, output  # no credentials for that host: say which to set
    assert "SHIPYARD_REGISTRY_127_0_0_2_" in output
    assert "Traceback" not in output and GLOBAL not in output
    assert hub.mine(), "verify asked the registry"
    assert leaks(seen, hub.netloc) == [], "the global pair went to a registry verify reads"
    record(
        "verify of an image with the global credential pair set",
        area="credentials",
        cases=len(seen),
        injected="`shipyard verify 127.0.0.2:PORT/vendor/base:1` against a registry asking "
        "for Basic credentials, SHIPYARD_REGISTRY_USER/_PASSWORD set",
        result=f"{len(seen)} request(s), none with credentials; exit 2 naming the host's variables",
        figures={"attacks": len(seen), "leaks": len(leaks(seen, hub.netloc))},
    )
