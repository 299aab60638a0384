"""Registry faults from a scripted server: retries, back-off, time-outs, bounded budgets.

429 with Retry-After, 503 then success, a reset connection, an answer cut short, a
400 that must not be retried, a time-out, plain HTTP off loopback, bad names, a blob
or a manifest whose bytes do not match their digest. The server:
tests/unit/_fake_registry.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import socket
import time
from pathlib import Path

import pytest

from shipyard._http.retry import RetryPolicy
from shipyard.errors import UsageError
from shipyard.oci.remote.reference import InvalidReference
from shipyard.oci.remote.registry import MEDIA_OCI_MANIFEST, NotFound, Registry, RegistryError
from tests.unit._fake_registry import (
    CUT,
    DIGEST,
    RESET,
    FakeRegistry,
    Reply,
    Seen,
    client,
    errors,
    fake,
    sleeps,
)

__all__ = ["fake", "sleeps"]  # fixtures the tests take, imported for pytest to find


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
    caplog.set_level(logging.WARNING, logger="shipyard._http.retry")
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
