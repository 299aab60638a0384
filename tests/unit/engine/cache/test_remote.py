"""The registry cache's manifest: an OCI artifact manifest built from `oci.model` values,
which a restore reads back to the same files (issue 27, item 4)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from shipyard.artifacts import Artifact
from shipyard.engine.cache.checks import Declared
from shipyard.engine.cache.remote import ARTIFACT_TYPE, RemoteCache, _layers
from shipyard.oci.model import Descriptor, artifact_manifest_json


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
