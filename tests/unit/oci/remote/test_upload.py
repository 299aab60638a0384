"""Uploads that fail half-way: monolithic, chunked and resumed, or finished with their
answer lost. The server: tests/unit/_fake_registry.py.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

from tests.unit._fake_registry import RESET, FakeRegistry, client, errors, fake, sleeps

__all__ = ["fake", "sleeps"]  # fixtures the tests take, imported for pytest to find


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
    assert registry.stats.retries == 2  # the PATCH failure, then the restart (logged too)
