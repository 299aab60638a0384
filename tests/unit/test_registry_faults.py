"""Faults a real registry cannot produce on demand, from a tiny in-process HTTP server.

429 with Retry-After, 503 then success, a reset connection, an answer cut short, a
400 that must not be retried, the bearer-token flow with a small token endpoint,
an upload that fails half-way (monolithic, chunked and resumed, or finished with
its answer lost), a time-out, and a blob whose bytes do not match its digest.
Everything else is tested against real registries in
tests/integration/test_registry.py and, through a faulty proxy, test_faults.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import random
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from shipyard._http.retry import RetryPolicy
from shipyard._http.transport import http_timeout
from shipyard.errors import UsageError
from shipyard.oci.remote.reference import InvalidReference
from shipyard.oci.remote.registry import (
    MEDIA_OCI_MANIFEST,
    AuthError,
    NotFound,
    Registry,
    RegistryError,
)

Reply = tuple[int, dict[str, str], bytes]
RESET = "reset"  # close the connection with a TCP reset instead of answering
CUT = "cut"  # answer with the next reply's headers but half its body, then close
DIGEST = "sha256:" + "a" * 64
SECRET = "s3cret-token-pass"


@dataclass(frozen=True)
class Seen:
    """One request the fake server received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


Route = Reply | str | Callable[[Seen], Reply]


class FakeRegistry:
    """Scripted answers per (method, path); the last answer of a route repeats."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[Route]] = {}
        self.seen: list[Seen] = []
        self.host = ""

    def route(self, method: str, path: str, *replies: Route) -> None:
        self.routes[(method, path)] = list(replies)

    def count(self, method: str, path: str) -> int:
        return sum(1 for s in self.seen if (s.method, s.path) == (method, path))

    def answer(self, seen: Seen) -> Reply | str:
        self.seen.append(seen)
        queue = self.routes.get((seen.method, seen.path))
        if not queue:
            return 404, {}, b'{"errors":[{"code":"UNKNOWN_TO_FAKE","message":"no route"}]}'
        item = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(item, str):
            return item
        return item(seen) if callable(item) else item


def _handler(fake: FakeRegistry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the tests assert on what was seen."""

        def handle_any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            headers = {k.lower(): v for k, v in self.headers.items()}
            seen = Seen(self.command, parts.path, parse_qs(parts.query), headers, body)
            reply = fake.answer(seen)
            cut = reply == CUT
            if cut:
                reply = fake.answer(seen)  # the reply to cut short
                fake.seen.pop()
            if isinstance(reply, str):
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.connection.close()
                self.close_connection = True
                return
            status, extra, payload = reply
            self.send_response(status)
            for key, value in extra.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload[: len(payload) // 2] if cut else payload)
            if cut:
                self.close_connection = True

        do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = handle_any

    return Handler


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """Quiet: a client that timed out and left is part of the tests."""


@pytest.fixture
def fake() -> Iterator[FakeRegistry]:
    registry = FakeRegistry()
    server = _QuietServer(("127.0.0.1", 0), _handler(registry))
    server.daemon_threads = True
    registry.host = f"127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield registry
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def sleeps() -> list[float]:
    return []


def client(
    fake: FakeRegistry, sleeps: list[float], environ: dict[str, str] | None = None
) -> tuple[Registry, list[tuple[str, str, int | None]]]:
    """A Registry for the fake server whose retries record their pauses instead of sleeping."""
    policy = RetryPolicy(
        attempts=3, base_delay=0.5, max_delay=4.0, sleep=sleeps.append, rng=random.Random(3)
    )
    calls: list[tuple[str, str, int | None]] = []
    registry = Registry(
        f"http://{fake.host}",
        retry=policy,
        environ=environ if environ is not None else {"DOCKER_CONFIG": "/nonexistent"},
        on_request=lambda method, path, status: calls.append((method, path, status)),
        timeout=(5.0, 5.0),
    )
    return registry, calls


def errors(code: str, message: str) -> bytes:
    return json.dumps({"errors": [{"code": code, "message": message}]}).encode()


def test_429_waits_at_least_retry_after(fake: FakeRegistry, sleeps: list[float]) -> None:
    path = f"/v2/app/blobs/{DIGEST}"
    fake.route("HEAD", path, (429, {"Retry-After": "3"}, b""), (200, {}, b""))
    registry, _ = client(fake, sleeps)
    assert registry.blob_exists("app", DIGEST) is True
    assert fake.count("HEAD", path) == 2
    assert len(sleeps) == 1 and sleeps[0] >= 3.0
    assert registry.stats.retries == 1


def test_503_then_success_backs_off_and_logs_each_retry(
    fake: FakeRegistry, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="shipyard._http.transport")
    body = b'{"schemaVersion":2}'
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    headers = {"Content-Type": MEDIA_OCI_MANIFEST, "Docker-Content-Digest": digest}
    unavailable = errors("UNAVAILABLE", "try later")
    fake.route(
        "GET", "/v2/app/manifests/v1", (503, {}, unavailable), (502, {}, b""), (200, headers, body)
    )
    registry, _ = client(fake, sleeps)
    assert registry.get_manifest("app", "v1") == (body, MEDIA_OCI_MANIFEST, digest)
    assert fake.count("GET", "/v2/app/manifests/v1") == 3
    assert len(sleeps) == 2
    assert 0.25 <= sleeps[0] <= 0.5 and 0.5 <= sleeps[1] <= 1.0, "exponential, with jitter"
    assert [r.getMessage() for r in caplog.records] == [
        f"{fake.host}: get manifest app:v1: retry 1 of 2 in {sleeps[0]:.2f} s after: "
        "HTTP 503 UNAVAILABLE: try later",
        f"{fake.host}: get manifest app:v1: retry 2 of 2 in {sleeps[1]:.2f} s after: HTTP 502",
    ]


def test_an_answer_cut_short_is_asked_again(fake: FakeRegistry, sleeps: list[float]) -> None:
    body = json.dumps({"schemaVersion": 2, "pad": "x" * 500}).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    ok: Reply = (200, {"Content-Type": MEDIA_OCI_MANIFEST}, body)
    fake.route("GET", f"/v2/app/manifests/{digest}", CUT, ok, ok)
    tags: Reply = (200, {}, b'{"tags":["a"]}')
    fake.route("GET", "/v2/app/tags/list", CUT, tags, tags)
    registry, _ = client(fake, sleeps)
    assert registry.get_manifest("app", digest)[0] == body
    assert registry.tags("app") == ["a"]
    assert registry.stats.retries == 2 and len(sleeps) == 2


def test_a_blob_cut_short_is_fetched_again(
    fake: FakeRegistry, sleeps: list[float], tmp_path: Path
) -> None:
    data = random.Random(9).randbytes(10_000)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    whole: Reply = (200, {}, data)
    # Cut short with the true Content-Length, then a short but "complete" answer.
    fake.route("GET", f"/v2/app/blobs/{digest}", CUT, whole, (200, {}, data[:5000]), whole)
    registry, _ = client(fake, sleeps)
    dest = tmp_path / "blob"
    assert registry.pull_blob("app", digest, dest, size=len(data)) == len(data)
    assert dest.read_bytes() == data
    registry2, _ = client(fake, sleeps)
    assert registry2.pull_blob("app", digest, tmp_path / "again", size=len(data)) == len(data)
    assert fake.count("GET", f"/v2/app/blobs/{digest}") == 4
    assert not list(tmp_path.glob(".*.part"))


def test_connection_reset_is_retried(fake: FakeRegistry, sleeps: list[float]) -> None:
    fake.route("GET", "/v2/app/tags/list", RESET, (200, {}, b'{"name":"app","tags":["a","b"]}'))
    registry, calls = client(fake, sleeps)
    assert registry.tags("app") == ["a", "b"]
    assert calls == [("GET", "/v2/app/tags/list", None), ("GET", "/v2/app/tags/list", 200)]
    assert registry.stats.retries == 1 and len(sleeps) == 1


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, "MANIFEST_INVALID"), (404, "NAME_UNKNOWN"), (405, "UNSUPPORTED"), (409, "DENIED")],
)
def test_client_errors_are_not_retried(
    fake: FakeRegistry, sleeps: list[float], status: int, code: str
) -> None:
    fake.route("PUT", "/v2/team/app/manifests/v1", (status, {}, errors(code, "nope")))
    registry, _ = client(fake, sleeps)
    with pytest.raises(RegistryError) as caught:
        registry.put_manifest("team/app", "v1", b"{}", MEDIA_OCI_MANIFEST)
    assert fake.count("PUT", "/v2/team/app/manifests/v1") == 1
    assert sleeps == []
    assert caught.value.status == status and caught.value.codes == (code,)
    assert isinstance(caught.value, NotFound) == (status == 404)
    assert str(caught.value) == (
        f"{fake.host}: put manifest team/app:v1: HTTP {status} {code}: nope"
    )


def test_retries_are_bounded(fake: FakeRegistry, sleeps: list[float]) -> None:
    fake.route("GET", "/v2/", (503, {}, errors("UNAVAILABLE", "down")))
    registry, _ = client(fake, sleeps)
    with pytest.raises(RegistryError, match="gave up after 3 attempts") as caught:
        registry.ping()
    assert fake.count("GET", "/v2/") == 3 and len(sleeps) == 2
    assert not caught.value.transient, "an exhausted error is final, so callers do not retry again"

    fake.route("GET", "/v2/", (429, {"Retry-After": "100000"}, b""))
    sleeps.clear()
    with pytest.raises(RegistryError, match="HTTP 429; gave up after 1 attempts"):
        registry.ping()
    assert sleeps == [], "a Retry-After beyond the deadline is not waited for"


def test_a_stalled_answer_times_out_per_shipyard_http_timeout(
    fake: FakeRegistry, sleeps: list[float]
) -> None:
    def slow(seen: Seen) -> Reply:
        time.sleep(1.0)
        return 200, {}, b"{}"

    fake.route("GET", "/v2/", slow)
    registry = Registry(
        f"http://{fake.host}",
        retry=RetryPolicy(attempts=3, sleep=sleeps.append),
        environ={"SHIPYARD_HTTP_TIMEOUT": "0.2"},
    )
    started = time.monotonic()
    with pytest.raises(RegistryError, match=r"\(timed out\); gave up after 3 attempts"):
        registry.ping()
    assert time.monotonic() - started < 2.0
    assert len(sleeps) == 2


def test_http_timeout_from_the_environment() -> None:
    assert http_timeout({}) == (10.0, 120.0)
    assert http_timeout({"SHIPYARD_HTTP_TIMEOUT": "2.5"}) == (2.5, 2.5)
    assert http_timeout({"SHIPYARD_HTTP_TIMEOUT": " 300 "}) == (10.0, 300.0)
    for junk in ("0", "-1", "soon", "nan", "1e9"):
        with pytest.raises(UsageError, match="SHIPYARD_HTTP_TIMEOUT"):
            http_timeout({"SHIPYARD_HTTP_TIMEOUT": junk})


def test_refused_connection_is_retried_then_reported(sleeps: list[float]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the client connects
    registry = Registry(
        f"http://127.0.0.1:{port}", retry=RetryPolicy(attempts=2, sleep=sleeps.append), environ={}
    )
    with pytest.raises(
        RegistryError, match=r"no answer from 127\.0\.0\.1:\d+ \(Connection refused\)"
    ):
        registry.ping()
    assert len(sleeps) == 1


def token_endpoint(fake: FakeRegistry, issued: dict[str, list[str]]) -> Callable[[Seen], Reply]:
    expected = "Basic " + base64.b64encode(f"ci:{SECRET}".encode()).decode()

    def answer(seen: Seen) -> Reply:
        if seen.headers.get("authorization") != expected:
            return 401, {"WWW-Authenticate": 'Basic realm="token"'}, errors("UNAUTHORIZED", "bad")
        token = f"token-{len(issued) + 1}"
        issued[token] = seen.query.get("scope", [])
        assert seen.query.get("service") == ["fake-registry"]
        return 200, {}, json.dumps({"token": token, "expires_in": 300}).encode()

    return answer


def protected(fake: FakeRegistry, issued: dict[str, list[str]], scope: str, ok: Reply) -> Route:
    def answer(seen: Seen) -> Reply:
        token = seen.headers.get("authorization", "").removeprefix("Bearer ")
        if scope in issued.get(token, []):
            return ok
        challenge = (
            f'Bearer realm="http://{fake.host}/token",service="fake-registry",scope="{scope}"'
        )
        return 401, {"WWW-Authenticate": challenge}, errors("UNAUTHORIZED", "authenticate")

    return answer


def test_bearer_token_flow_caches_tokens_per_scope(fake: FakeRegistry, sleeps: list[float]) -> None:
    issued: dict[str, list[str]] = {}
    fake.route("GET", "/token", token_endpoint(fake, issued))
    pull, push = "repository:app:pull", "repository:app:pull,push"
    fake.route("HEAD", f"/v2/app/blobs/{DIGEST}", protected(fake, issued, pull, (200, {}, b"")))
    other = "sha256:" + "b" * 64
    fake.route("HEAD", f"/v2/app/blobs/{other}", protected(fake, issued, pull, (404, {}, b"")))
    fake.route("PUT", "/v2/app/manifests/v1", protected(fake, issued, push, (201, {}, b"")))
    env = {"SHIPYARD_REGISTRY_USER": "ci", "SHIPYARD_REGISTRY_PASSWORD": SECRET}
    registry, _ = client(fake, sleeps, environ=env)

    assert registry.blob_exists("app", DIGEST) is True
    assert registry.blob_exists("app", other) is False
    registry.put_manifest("app", "v1", b"{}", MEDIA_OCI_MANIFEST)

    assert issued == {"token-1": [pull], "token-2": [push]}
    assert fake.count("GET", "/token") == 2, "the pull token was reused"
    assert fake.count("HEAD", f"/v2/app/blobs/{DIGEST}") == 2  # 401, then with the token
    assert fake.count("HEAD", f"/v2/app/blobs/{other}") == 1  # the token sent up front
    assert fake.count("PUT", "/v2/app/manifests/v1") == 1
    assert all(SECRET not in str(s.headers) for s in fake.seen if s.path != "/token")


def test_bearer_with_a_wrong_password_is_an_auth_error(
    fake: FakeRegistry, sleeps: list[float]
) -> None:
    issued: dict[str, list[str]] = {}
    fake.route("GET", "/token", token_endpoint(fake, issued))
    fake.route("GET", "/v2/", protected(fake, issued, "", (200, {}, b"{}")))
    wrong = "wrong-" + SECRET
    env = {"SHIPYARD_REGISTRY_USER": "ci", "SHIPYARD_REGISTRY_PASSWORD": wrong}
    registry, _ = client(fake, sleeps, environ=env)
    with pytest.raises(AuthError) as caught:
        registry.ping()
    message = str(caught.value)
    assert caught.value.exit_code == 2
    assert wrong not in message and SECRET not in message
    assert "rejected the credentials from $SHIPYARD_REGISTRY_USER" in message
    assert f"docker login {fake.host}" in message
    assert issued == {}
    assert sleeps == [], "authentication failures are not retried"


def test_anonymous_token_when_there_are_no_credentials(
    fake: FakeRegistry, sleeps: list[float]
) -> None:
    issued: dict[str, list[str]] = {}

    def anonymous(seen: Seen) -> Reply:
        assert "authorization" not in seen.headers
        issued["anon"] = seen.query.get("scope", [])
        return 200, {}, b'{"access_token": "anon"}'

    fake.route("GET", "/token", anonymous)
    pull = "repository:library/app:pull"
    ok = (200, {"Content-Type": MEDIA_OCI_MANIFEST}, b"{}")
    fake.route("GET", "/v2/library/app/manifests/1", protected(fake, issued, pull, ok))
    registry, _ = client(fake, sleeps)
    assert registry.get_manifest("library/app", "1")[0] == b"{}"
    assert issued == {"anon": [pull]}


def test_failed_upload_starts_again(
    fake: FakeRegistry, sleeps: list[float], tmp_path: Path
) -> None:
    data = random.Random(5).randbytes(70_000)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blob = tmp_path / "blob"
    blob.write_bytes(data)
    fake.route("HEAD", f"/v2/app/blobs/{digest}", (404, {}, b""))
    fake.route(
        "POST",
        "/v2/app/blobs/uploads/",
        (202, {"Location": "/upload/1?_state=one"}, b""),
        (202, {"Location": f"http://{fake.host}/upload/2?_state=two"}, b""),
    )
    fake.route("PUT", "/upload/1", (500, {}, errors("UNKNOWN", "disk full")))
    fake.route("PUT", "/upload/2", (201, {}, b""))
    registry, _ = client(fake, sleeps)

    assert registry.push_blob("app", digest, len(data), blob) is True
    [final] = [s for s in fake.seen if s.path == "/upload/2"]
    assert final.query == {"_state": ["two"], "digest": [digest]}
    assert final.body == data
    assert final.headers["content-type"] == "application/octet-stream"
    assert registry.stats.bytes_uploaded == 2 * len(data)
    assert registry.stats.retries == 1 and registry.stats.blobs_uploaded == 1
    assert fake.count("HEAD", f"/v2/app/blobs/{digest}") == 2, "checked again before restarting"


def test_upload_whose_answer_was_lost_is_not_sent_again(
    fake: FakeRegistry, sleeps: list[float], tmp_path: Path
) -> None:
    data = b"landed" * 100
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blob = tmp_path / "blob"
    blob.write_bytes(data)
    fake.route("HEAD", f"/v2/app/blobs/{digest}", (404, {}, b""), (200, {}, b""))
    fake.route("POST", "/v2/app/blobs/uploads/", (202, {"Location": "/upload/1"}, b""))
    fake.route("PUT", "/upload/1", RESET)  # the registry stored it; the answer was lost
    registry, _ = client(fake, sleeps)
    assert registry.push_blob("app", digest, len(data), blob) is True
    assert fake.count("POST", "/v2/app/blobs/uploads/") == 1
    assert fake.count("PUT", "/upload/1") == 1
    assert registry.stats.blobs_uploaded == 1 and registry.stats.retries == 1


def test_chunked_upload_resumes_where_the_registry_is(
    fake: FakeRegistry, sleeps: list[float], tmp_path: Path
) -> None:
    data = random.Random(6).randbytes(3000)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blob = tmp_path / "blob"
    blob.write_bytes(data)
    fake.route("HEAD", f"/v2/app/blobs/{digest}", (404, {}, b""))
    fake.route("POST", "/v2/app/blobs/uploads/", (202, {"Location": "/up/1"}, b""))
    fake.route("PATCH", "/up/1", (202, {"Location": "/up/2", "Range": "0-999"}, b""))
    # The second chunk reaches the registry but its answer is lost.
    fake.route("PATCH", "/up/2", RESET)
    fake.route("GET", "/up/2", (204, {"Location": "/up/3", "Range": "0-1999"}, b""))
    fake.route(
        "PATCH", "/up/3", (503, {}, b""), (202, {"Location": "/up/4", "Range": "0-2999"}, b"")
    )
    fake.route("GET", "/up/3", (204, {"Location": "/up/3", "Range": "0-1999"}, b""))
    fake.route("PUT", "/up/4", (201, {}, b""))
    registry, _ = client(fake, sleeps)
    assert registry.push_blob("app", digest, len(data), blob, chunk_size=1000) is True
    patches = [
        (s.path, s.headers["content-range"], s.body) for s in fake.seen if s.method == "PATCH"
    ]
    assert patches == [
        ("/up/1", "0-999", data[:1000]),
        ("/up/2", "1000-1999", data[1000:2000]),
        ("/up/3", "2000-2999", data[2000:]),
        ("/up/3", "2000-2999", data[2000:]),
    ]
    assert fake.count("POST", "/v2/app/blobs/uploads/") == 1, "resumed, not started again"
    [final] = [s for s in fake.seen if s.method == "PUT"]
    assert final.query == {"digest": [digest]}
    assert registry.stats.retries == 2 and registry.stats.blobs_uploaded == 1


def test_chunked_upload_whose_session_is_gone_starts_again(
    fake: FakeRegistry, sleeps: list[float], tmp_path: Path
) -> None:
    data = random.Random(8).randbytes(2000)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blob = tmp_path / "blob"
    blob.write_bytes(data)
    fake.route("HEAD", f"/v2/app/blobs/{digest}", (404, {}, b""))
    fake.route(
        "POST",
        "/v2/app/blobs/uploads/",
        (202, {"Location": "/old/1"}, b""),
        (202, {"Location": "/new/1"}, b""),
    )
    fake.route("PATCH", "/old/1", (500, {}, b""))
    fake.route("GET", "/old/1", (404, {}, errors("BLOB_UPLOAD_UNKNOWN", "gone")))
    fake.route("PATCH", "/new/1", (202, {"Location": "/new/2", "Range": "0-999"}, b""))
    fake.route("PATCH", "/new/2", (202, {"Location": "/new/3", "Range": "0-1999"}, b""))
    fake.route("PUT", "/new/3", (201, {}, b""))
    registry, _ = client(fake, sleeps)
    assert registry.push_blob("app", digest, len(data), blob, chunk_size=1000) is True
    assert fake.count("POST", "/v2/app/blobs/uploads/") == 2
    assert fake.count("HEAD", f"/v2/app/blobs/{digest}") == 2, "checked before starting again"
    assert registry.stats.retries == 2


def test_pulled_blob_with_wrong_bytes_is_rejected(
    fake: FakeRegistry, sleeps: list[float], tmp_path: Path
) -> None:
    fake.route("GET", f"/v2/app/blobs/{DIGEST}", (200, {}, b"not what was asked for"))
    registry, _ = client(fake, sleeps)
    dest = tmp_path / "out" / "blob"
    with pytest.raises(RegistryError, match="the registry sent content with sha256:"):
        registry.pull_blob("app", DIGEST, dest)
    assert not dest.exists()
    assert list(dest.parent.iterdir()) == [], "the partial download was removed"
    assert fake.count("GET", f"/v2/app/blobs/{DIGEST}") == 1


def test_manifest_with_a_lying_digest_header_is_rejected(
    fake: FakeRegistry, sleeps: list[float]
) -> None:
    headers = {"Content-Type": MEDIA_OCI_MANIFEST, "Docker-Content-Digest": DIGEST}
    fake.route("GET", "/v2/app/manifests/v1", (200, headers, b"{}"))
    fake.route("GET", f"/v2/app/manifests/{DIGEST}", (200, headers, b"{}"))
    registry, _ = client(fake, sleeps)
    with pytest.raises(RegistryError, match=f"Docker-Content-Digest {DIGEST} !="):
        registry.get_manifest("app", "v1")
    with pytest.raises(RegistryError, match="sent a manifest with sha256:"):
        registry.get_manifest("app", DIGEST)


def test_plain_http_is_refused_for_hosts_off_loopback() -> None:
    with pytest.raises(UsageError) as caught:
        Registry("http://registry.test:5000", environ={})
    message = str(caught.value)
    assert "insecure=True" in message
    assert "SHIPYARD_INSECURE_REGISTRIES=registry.test:5000" in message
    allowed = Registry(
        "http://registry.test:5000", environ={"SHIPYARD_INSECURE_REGISTRIES": "registry.test:5000"}
    )
    assert allowed.insecure
    assert Registry("http://registry.test:5000", insecure=True, environ={}).insecure
    with pytest.raises(UsageError, match="scheme"):
        Registry("ftp://127.0.0.1:5000", environ={})
    with pytest.raises(InvalidReference):
        Registry("127.0.0.1:5000/path; rm -rf /", environ={})


def test_bad_names_never_reach_the_network(fake: FakeRegistry, sleeps: list[float]) -> None:
    registry, _ = client(fake, sleeps)
    for call in (
        lambda: registry.blob_exists("../etc", DIGEST),
        lambda: registry.blob_exists("app", "sha256:../../x"),
        lambda: registry.get_manifest("app", "v1?x=1"),
        lambda: registry.put_manifest("app", "v1/../v2", b"{}", MEDIA_OCI_MANIFEST),
    ):
        with pytest.raises(InvalidReference):
            call()
    assert fake.seen == []


def test_identity_token_is_exchanged_with_an_oauth2_refresh_grant(
    fake: FakeRegistry, sleeps: list[float], tmp_path: Path
) -> None:
    issued: dict[str, list[str]] = {}

    def oauth(seen: Seen) -> Reply:
        form = parse_qs(seen.body.decode())
        assert "authorization" not in seen.headers
        assert form["grant_type"] == ["refresh_token"]
        assert form["refresh_token"] == ["identity-xyz"]
        assert form["service"] == ["fake-registry"] and form["client_id"] == ["shipyard"]
        issued["oauth"] = form["scope"]
        return 200, {}, b'{"access_token": "oauth", "expires_in": 120}'

    fake.route("POST", "/token", oauth)
    path = f"/v2/app/blobs/{DIGEST}"
    fake.route("HEAD", path, protected(fake, issued, "repository:app:pull", (200, {}, b"")))
    config = {"auths": {fake.host: {"identitytoken": "identity-xyz"}}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    registry, _ = client(fake, sleeps, environ={"DOCKER_CONFIG": str(tmp_path)})
    assert registry.blob_exists("app", DIGEST)
    assert issued == {"oauth": ["repository:app:pull"]}
    assert fake.count("HEAD", path) == 2
