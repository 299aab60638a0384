"""The registry cache's manifest: an OCI artifact manifest built from `oci.model` values,
which a restore reads back to the same files (issue 27, item 4)."""

from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from shipyard.artifacts import Artifact
from shipyard.engine.cache.checks import Declared
from shipyard.engine.cache.endpoint import RemoteUnavailable
from shipyard.engine.cache.remote import ARTIFACT_TYPE, RemoteCache, _layer, _layers
from shipyard.oci.model import Descriptor, artifact_manifest_json, as_annotations
from tests.unit._fake_registry import FakeRegistry, client, errors, fake, sleeps

__all__ = ["fake", "sleeps"]  # fixtures the tests take, imported for pytest to find

EMPTY = Descriptor.of("application/vnd.oci.empty.v1+json", b"{}").digest


class _Registry:
    """Records what a store pushes."""

    host = "127.0.0.1:9"

    def __init__(self) -> None:
        self.blobs: dict[str, int] = {}
        self.manifests: dict[str, bytes] = {}

    def push_blob(self, repo: str, digest: str, size: int, path: Path) -> None:
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest.removeprefix("sha256:")
        self.blobs[digest] = size

    def put_manifest(self, repo: str, tag: str, data: bytes, media_type: str) -> str:
        self.manifests[tag] = data
        return "sha256:" + hashlib.sha256(data).hexdigest()


def test_a_stored_entry_is_an_artifact_manifest_a_restore_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "dist" / "app.pyz"
    path.parent.mkdir()
    path.write_bytes(b"zipapp")
    path.chmod(0o755)
    artifact = Artifact(
        "zipapp", "app", "linux/amd64", path, hashlib.sha256(b"zipapp").hexdigest(), 6
    )
    registry = _Registry()
    RemoteCache(registry, "cache").store("key", (artifact,), tmp_path)  # type: ignore[arg-type]
    data = registry.manifests["key"]
    doc = json.loads(data)
    config = Descriptor.of("application/vnd.oci.empty.v1+json", b"{}")
    layers = [Descriptor.from_json(layer) for layer in doc["layers"]]
    assert data == artifact_manifest_json(ARTIFACT_TYPE, config, layers)
    assert set(registry.blobs) == {config.digest, f"sha256:{artifact.sha256}"}
    found = _layers(data, Declared.dist())
    assert found is not None
    (placed,) = found
    assert placed.parts == ("dist", "app.pyz") and placed.mode == 0o755
    assert (placed.sha256, placed.size, placed.about.kind) == (artifact.sha256, 6, "zipapp")


# -- what the registry's failures mean to a build (issue 29) ------------------------------


def _stored_artifact(tmp_path: Path) -> Artifact:
    path = tmp_path / "dist" / "a.whl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"wheel")
    return Artifact("wheel", "", "any", path, hashlib.sha256(b"wheel").hexdigest(), 5)


def test_a_refused_push_makes_the_cache_read_only_not_a_failure(
    fake: FakeRegistry, sleeps: list[float], tmp_path: Path
) -> None:
    """HTTP 403 on the upload (credentials that may only pull): nothing stored,
    `writable` False, no exception; reads go on."""
    fake.route("GET", "/v2/", (200, {}, b"{}"))
    fake.route("HEAD", f"/v2/cache/blobs/{EMPTY}", (404, {}, b""))
    fake.route("POST", "/v2/cache/blobs/uploads/", (403, {}, errors("DENIED", "read-only")))
    registry, _ = client(fake, sleeps)
    cache = RemoteCache(registry, "cache")
    cache.store("key", (_stored_artifact(tmp_path),), tmp_path)
    assert cache.writable is False
    assert cache.stats.stored == 0 and cache.stats.calls >= 2
    assert fake.count("PUT", "/v2/cache/manifests/key") == 0


def test_a_registry_failing_on_every_try_is_unavailable(
    fake: FakeRegistry, sleeps: list[float], tmp_path: Path
) -> None:
    fake.route("GET", "/v2/cache/manifests/key", (503, {}, errors("UNAVAILABLE", "down")))
    registry, _ = client(fake, sleeps)
    with pytest.raises(RemoteUnavailable, match="HTTP 503"):
        RemoteCache(registry, "cache").restore("key", tmp_path)
    assert len(sleeps) == 2, "the registry client's bounded retries came first"


def test_a_blob_with_other_bytes_is_a_miss_not_an_unavailable_server(
    fake: FakeRegistry, sleeps: list[float], tmp_path: Path
) -> None:
    artifact = _stored_artifact(tmp_path / "made")
    layer = _layer(artifact, tmp_path / "made")
    config = Descriptor.of("application/vnd.oci.empty.v1+json", b"{}")
    manifest = artifact_manifest_json(ARTIFACT_TYPE, config, [layer])
    media = {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}
    fake.route("GET", "/v2/cache/manifests/key", (200, media, manifest))
    fake.route("GET", f"/v2/cache/blobs/{layer.digest}", (200, {}, b"WHEEL"))
    registry, _ = client(fake, sleeps)
    cache = RemoteCache(registry, "cache")
    assert cache.restore("key", tmp_path / "repo") is None
    stats = cache.stats
    assert (stats.hits, stats.misses) == (0, 1)
    assert stats.bytes_down >= len(manifest) + 5


def _two_entries_naming_one_blob(fake: FakeRegistry, tmp_path: Path) -> Descriptor:
    """Entries `one` (dist/a.whl) and `two` (dist/b.whl) whose one layer is the same
    blob (b"wheel"), served by `fake`; that layer."""
    artifact = _stored_artifact(tmp_path / "made")
    config = Descriptor.of("application/vnd.oci.empty.v1+json", b"{}")
    media = {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}
    layer = _layer(artifact, tmp_path / "made")
    title = {"org.opencontainers.image.title": "dist/b.whl"}
    other = Descriptor(
        layer.media_type,
        layer.digest,
        layer.size,
        annotations=as_annotations({**dict(layer.annotations), **title}),
    )
    for key, entry in (("one", layer), ("two", other)):
        manifest = artifact_manifest_json(ARTIFACT_TYPE, config, [entry])
        fake.route("GET", f"/v2/cache/manifests/{key}", (200, media, manifest))
    return layer


def test_restores_in_parallel_download_a_blob_they_share_once(
    fake: FakeRegistry, sleeps: list[float], tmp_path: Path
) -> None:
    """Actions restore on several workers: the second restore waits for the blob the
    first is downloading (slowly here) and copies it, instead of downloading it too."""
    layer = _two_entries_naming_one_blob(fake, tmp_path)

    def slowly(_: object) -> tuple[int, dict[str, str], bytes]:
        time.sleep(0.5)
        return 200, {}, b"wheel"

    fake.route("GET", f"/v2/cache/blobs/{layer.digest}", slowly)
    registry, _ = client(fake, sleeps)
    cache = RemoteCache(registry, "cache")
    repo = tmp_path / "repo"
    with ThreadPoolExecutor(2) as pool:
        restored = list(pool.map(lambda key: cache.restore(key, repo), ("one", "two")))
    assert [r[0].path.read_bytes() for r in restored if r] == [b"wheel", b"wheel"]
    assert fake.count("GET", f"/v2/cache/blobs/{layer.digest}") == 1
    assert cache.stats.hits == 2


def test_a_blob_restored_once_is_copied_not_downloaded_again(
    fake: FakeRegistry, sleeps: list[float], tmp_path: Path
) -> None:
    """Image variants share base layers: two entries naming one blob download it once;
    the second copy is checked against its digest as any restore is."""
    layer = _two_entries_naming_one_blob(fake, tmp_path)
    fake.route("GET", f"/v2/cache/blobs/{layer.digest}", (200, {}, b"wheel"))
    registry, _ = client(fake, sleeps)
    cache = RemoteCache(registry, "cache")
    repo = tmp_path / "repo"
    (first,) = cache.restore("one", repo) or ()
    (second,) = cache.restore("two", repo) or ()
    assert second.path == repo / "dist" / "b.whl" and second.path.read_bytes() == b"wheel"
    assert fake.count("GET", f"/v2/cache/blobs/{layer.digest}") == 1
    assert cache.stats.hits == 2
    second.path.write_bytes(b"WHEEL")  # same size, other bytes: downloaded again
    first.path.unlink()
    (again,) = cache.restore("one", repo) or ()
    assert again.path.read_bytes() == b"wheel"
    assert fake.count("GET", f"/v2/cache/blobs/{layer.digest}") == 2
