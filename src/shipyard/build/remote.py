"""A registry-backed action cache, so CI machines share work through an OCI registry.

Each action's outputs are stored as an OCI artifact: the output files are blobs
(content-addressed, so they dedupe across actions and machines), listed as layers
of a manifest whose tag is the action key. Blobs go up first and the tag last, so
a reader never finds a key whose outputs are incomplete.

Temporaries live under the checkout's dist/ (never the system temp folder), where
the next build sweeps what a killed one left.
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


def _scratch(repo: Path) -> tempfile.TemporaryDirectory[str]:
    """A temporary folder in `repo`/dist, swept by the next build if this one is killed."""
    dist = repo / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}remote-", dir=dist)


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
        """Pull the artifact tagged `key` and put its files in place; None on a miss.

        Every blob is downloaded before any output is replaced, so a blob the
        registry lost is a miss that leaves the outputs as they were.
        """
        try:
            data, _, _ = self.registry.get_manifest(self.repository, key, [MEDIA_OCI_MANIFEST])
        except NotFound:
            return None
        manifest = json.loads(data)
        if manifest.get("artifactType") != ARTIFACT_TYPE:
            return None
        layers = manifest["layers"]
        restored: list[Artifact] = []
        with _scratch(repo) as tmp:
            pulled: list[tuple[Path, Path, int]] = []
            for layer in layers:
                relative = Path(layer["annotations"][_TITLE])
                if relative.is_absolute() or ".." in relative.parts:
                    return None  # never write outside the repository
                blob = Path(tmp) / layer["digest"].removeprefix("sha256:")
                try:
                    self.registry.pull_blob(
                        self.repository, layer["digest"], blob, size=layer["size"]
                    )
                except NotFound:
                    return None
                mode = int(layer["annotations"].get(_MODE, "644"), 8)
                pulled.append((blob, repo / relative, mode))
            for (blob, target, mode), layer in zip(pulled, layers, strict=True):
                publish_file(blob, target, mode)
                restored.append(
                    Artifact(target, layer["digest"].removeprefix("sha256:"), layer["size"])
                )
        return tuple(restored)

    def store(self, key: str, outputs: tuple[Artifact, ...], repo: Path) -> None:
        """Push the output blobs, an empty config, then the manifest tagged `key`."""
        with _scratch(repo) as tmp:
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
        """Store in the remote cache, then in the local one.

        In this order a key in the local cache is also in the remote one: a build
        killed between the two finds a local miss next time, takes the remote hit
        and fills the local cache. The other order would leave the remote without
        the key for good, since local hits never upload.
        """
        self.remote.store(key, outputs, repo)
        self.local.store(key, outputs, repo)
