"""A registry-backed action cache, so CI machines share work through an OCI registry.

Each action's outputs are stored as an OCI artifact: the output files are blobs
(content-addressed, so they dedupe across actions and machines), listed as layers
of a manifest whose tag is the action key. Blobs go up first and the tag last, so
a reader never finds a key whose outputs are incomplete.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from shipyard._fs import TEMP_PREFIX, publish_file
from shipyard.build.cache import OutputCache
from shipyard.build.engine import Artifact
from shipyard.errors import UsageError
from shipyard.oci.registry import MEDIA_OCI_MANIFEST, NotFound, Registry

__all__ = ["ARTIFACT_TYPE", "RemoteCache", "TieredCache", "parse_cache_url"]

ARTIFACT_TYPE = "application/vnd.shipyard.action.v1+json"
_EMPTY = b"{}"
_EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
_TITLE = "org.opencontainers.image.title"
_MODE = "dev.shipyard.mode"  # octal; a zipapp stays executable


def parse_cache_url(url: str) -> tuple[str, str]:
    """`oci://HOST[:PORT]/REPO` -> (host, repository)."""
    if not url.startswith("oci://") or "/" not in url[len("oci://") :]:
        raise UsageError(f"--cache={url}: write oci://HOST[:PORT]/REPOSITORY")
    host, _, repository = url[len("oci://") :].partition("/")
    return host, repository


@dataclass
class RemoteCache:
    """Action outputs as OCI artifacts in one registry repository, tagged by key."""

    registry: Registry
    repository: str

    def restore(self, key: str, repo: Path) -> tuple[Artifact, ...] | None:
        """Pull the artifact tagged `key` and put its files in place."""
        try:
            data, _, _ = self.registry.get_manifest(self.repository, key, [MEDIA_OCI_MANIFEST])
        except NotFound:
            return None
        manifest = json.loads(data)
        if manifest.get("artifactType") != ARTIFACT_TYPE:
            return None
        restored: list[Artifact] = []
        with tempfile.TemporaryDirectory(prefix=TEMP_PREFIX) as tmp:
            for layer in manifest["layers"]:
                relative = Path(layer["annotations"][_TITLE])
                if relative.is_absolute() or ".." in relative.parts:
                    return None  # never write outside the repository
                blob = Path(tmp) / layer["digest"].removeprefix("sha256:")
                self.registry.pull_blob(self.repository, layer["digest"], blob, size=layer["size"])
                target = repo / relative
                publish_file(blob, target, int(layer["annotations"].get(_MODE, "644"), 8))
                restored.append(
                    Artifact(target, layer["digest"].removeprefix("sha256:"), layer["size"])
                )
        return tuple(restored)

    def store(self, key: str, outputs: tuple[Artifact, ...], repo: Path) -> None:
        """Push the output blobs, an empty config, then the manifest tagged `key`."""
        with tempfile.TemporaryDirectory(prefix=TEMP_PREFIX) as tmp:
            empty = Path(tmp) / "empty.json"
            empty.write_bytes(_EMPTY)
            empty_digest = "sha256:" + hashlib.sha256(_EMPTY).hexdigest()
            self.registry.push_blob(self.repository, empty_digest, len(_EMPTY), empty)
            layers = []
            for artifact in outputs:
                digest = f"sha256:{artifact.sha256}"
                self.registry.push_blob(self.repository, digest, artifact.size, artifact.path)
                layers.append(
                    {
                        "mediaType": "application/octet-stream",
                        "digest": digest,
                        "size": artifact.size,
                        "annotations": {
                            _TITLE: str(artifact.path.relative_to(repo)),
                            _MODE: f"{artifact.path.stat().st_mode & 0o755:o}",
                        },
                    }
                )
        manifest = {
            "schemaVersion": 2,
            "mediaType": MEDIA_OCI_MANIFEST,
            "artifactType": ARTIFACT_TYPE,
            "config": {"mediaType": _EMPTY_TYPE, "digest": empty_digest, "size": len(_EMPTY)},
            "layers": layers,
        }
        data = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
        self.registry.put_manifest(self.repository, key, data, MEDIA_OCI_MANIFEST)


@dataclass
class TieredCache:
    """The local cache first, then the remote one; a remote hit fills the local cache."""

    local: OutputCache
    remote: OutputCache

    def restore(self, key: str, repo: Path) -> tuple[Artifact, ...] | None:
        """Local hit, else remote hit (copied into the local cache), else None."""
        found = self.local.restore(key, repo)
        if found is None:
            found = self.remote.restore(key, repo)
            if found is not None:
                self.local.store(key, found, repo)
        return found

    def store(self, key: str, outputs: tuple[Artifact, ...], repo: Path) -> None:
        """Store in both."""
        self.local.store(key, outputs, repo)
        self.remote.store(key, outputs, repo)
