"""Things attached to an image, as cosign attaches them: a manifest under the tag
`sha256-<hex>.<suffix>` (`.sig` signatures, `.att` attestations, `.sbom` SBOMs) whose
layers are the attached documents, with cosign's near-empty image config.

One definition for every kind: the tag, the config, the manifest, and the push
(blobs, then the manifest, whose stored digest is checked).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.errors import ShipyardError
from shipyard.oci.mediatypes import OCI_CONFIG, OCI_MANIFEST
from shipyard.oci.remote.reference import validate_digest
from shipyard.oci.remote.registry import Registry

__all__ = ["Attachment", "attached_tag", "attachment", "attachment_config", "push_attachment"]


def attached_tag(digest: str, suffix: str) -> str:
    """The tag cosign attaches things to an image under: `sha256-<hex>.<suffix>`."""
    algorithm, _, hexpart = validate_digest(digest).partition(":")
    return f"{algorithm}-{hexpart}.{suffix}"


def attachment_config(layers: Sequence[Mapping[str, Any]]) -> bytes:
    """The near-empty image config cosign gives its attachment manifests."""
    zero = "0001-01-01T00:00:00Z"
    return json.dumps(
        {
            "architecture": "",
            "created": zero,
            "history": [{"created": zero}],
            "os": "",
            "rootfs": {"type": "layers", "diff_ids": [layer["digest"] for layer in layers]},
            "config": {},
        },
        separators=(",", ":"),
    ).encode()


@dataclass(frozen=True)
class Attachment:
    """An attachment manifest and the blobs to push before it (digest -> bytes): the
    new documents and the config; layers already in the repository need not be here."""

    manifest: bytes
    blobs: Mapping[str, bytes]

    @property
    def digest(self) -> str:
        """The manifest's digest."""
        return "sha256:" + hashlib.sha256(self.manifest).hexdigest()


def attachment(layers: Sequence[Mapping[str, Any]], new: Mapping[str, bytes]) -> Attachment:
    """The manifest whose layers are `layers` (descriptors, in order), with cosign's
    config; `new` are the layer blobs to push with it. Deterministic: the same layers
    give the same digest."""
    config = attachment_config(layers)
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "size": len(config), "digest": config_digest},
            "layers": list(layers),
        },
        separators=(",", ":"),
    ).encode()
    return Attachment(manifest, {**new, config_digest: config})


def push_attachment(
    client: Registry,
    repo: str,
    tag: str,
    made: Attachment,
    *,
    on_step: Callable[[str], None] = lambda _: None,
    verb: str = "attached",
) -> bool:
    """`made` into `repo` under `tag` (its blobs, then the manifest); False when the tag
    already names the same manifest (nothing pushed). ShipyardError when the registry
    stores the manifest under another digest. `verb` starts the step's line."""
    where = f"{client.host}/{repo}:{tag}"
    if client.manifest_exists(repo, tag) == made.digest:
        on_step(f"have {where}")
        return False
    with tempfile.TemporaryDirectory(prefix="shipyard-attach-") as tmp:
        for digest, data in made.blobs.items():
            path = Path(tmp) / digest.replace(":", "-")
            path.write_bytes(data)
            client.push_blob(repo, digest, len(data), path)
    pushed = client.put_manifest(repo, tag, made.manifest, OCI_MANIFEST)
    if pushed != made.digest:
        raise ShipyardError(f"{where} was stored as {pushed}, not {made.digest}")
    on_step(f"{verb} {where} -> {pushed}")
    return True
