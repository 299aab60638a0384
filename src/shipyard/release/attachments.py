"""The SBOM attachments of images, as `cosign attach sbom` writes them.

An attachment is a manifest tagged `sha256-<hex>.sbom` whose layers are CycloneDX
JSON documents (one per platform for an index, one for a platform manifest), each
annotated with its file name and platform. Staging makes them; publish and
promote rebuild them from the staged folder and check each against the digest
release.json gives it, so a document changed since staging is never attached.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

from shipyard.errors import ShipyardError
from shipyard.oci.mediatypes import CYCLONEDX_JSON
from shipyard.oci.remote.attach import Attachment
from shipyard.oci.remote.attach import attachment as make_attachment
from shipyard.release.staged import RELEASE_JSON, StagedRelease, inside

__all__ = ["PLATFORM_NOTE", "attachment", "staged_attachments"]

_TITLE = "org.opencontainers.image.title"
PLATFORM_NOTE = "dev.shipyard.sbom.platform"


def attachment(documents: Sequence[tuple[str, str, bytes]]) -> Attachment:
    """The manifest whose layers are `documents` ((file name, platform, bytes)), each
    typed `CYCLONEDX_JSON` (CycloneDX JSON), as `cosign attach sbom` writes one.
    Deterministic: the same documents give the same digest."""
    blobs: dict[str, bytes] = {}
    layers = []
    for filename, platform, data in documents:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        layers.append(
            {
                "mediaType": CYCLONEDX_JSON,
                "size": len(data),
                "digest": digest,
                "annotations": {_TITLE: filename, PLATFORM_NOTE: platform},
            }
        )
    return make_attachment(layers, blobs)


def staged_attachments(
    folder: Path, release: StagedRelease, error: Callable[[str], ShipyardError]
) -> dict[str, Attachment]:
    """Every SBOM attachment of the release's images, rebuilt from the staged documents
    and checked against the digest release.json gives it; `error(message)` is raised
    when one differs (a document changed since it was staged) or is missing."""
    platforms = {f.path: f.platform for f in release.files("sbom")}
    made: dict[str, Attachment] = {}
    for image in release.images:
        for sbom in image.sboms:
            documents = []
            for rel in sbom.documents:
                path = inside(folder, rel)
                try:
                    data = path.read_bytes()
                except OSError:
                    raise error(
                        f"{path} is missing from the staged release; stage it again"
                    ) from None
                documents.append((Path(rel).name, platforms.get(rel, ""), data))
            found = attachment(documents)
            if found.digest != sbom.digest:
                raise error(
                    f"{folder / RELEASE_JSON}: the SBOMs of {image.binary} make the "
                    f"attachment {found.digest}, not the staged {sbom.digest} (a document "
                    "changed since it was staged); nothing was sent. Stage the release again"
                )
            made[sbom.digest] = found
    return made
