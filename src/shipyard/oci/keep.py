"""Which platforms of the image already in dist/ a build of some platforms keeps.

`shipyard build --platform linux/arm64` builds one platform of a binary's image. The
other platforms of the image already in dist/images/<binary>/ are kept only when that
image was built from the same inputs but the platforms: the layout's index.json entry
carries the digest of those inputs (`BUILD_NOTE`, see `build_identity`); the pushed
index does not, so published bytes depend on the image's content only. Same wheels, lock, settings,
base, stamp and version, so a kept manifest is the very one a build of every platform
makes, and the merged index is byte for byte the full build's. An index built from
anything else (an edited source, another version, an older shipyard) keeps nothing.

What is kept is part of the action's key (`with_kept`): a cache entry of a subset
build holds exactly the merged image its key names. Light on purpose (JSON and
hashes, no tar or HTTP code): keys are computed before any builder is loaded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from shipyard import _json
from shipyard._json import Inputs, Value, canonical
from shipyard.oci.layout import blob_path
from shipyard.oci.mediatypes import is_index
from shipyard.oci.model import OCIError, Platform

__all__ = ["BUILD_NOTE", "KEPT", "build_identity", "kept_platforms", "with_kept"]

# The index annotation naming what an image was built from, but its platforms.
BUILD_NOTE = "dev.shipyard.image.inputs"
# The key input listing the manifests kept from the image in dist/ (`platform@digest`).
KEPT = "kept"


def build_identity(inputs: Mapping[str, object]) -> str:
    """The digest of an image action's inputs without its platforms and what it keeps:
    equal for a build of every platform and a build of some, from the same sources."""
    rest = {k: v for k, v in inputs.items() if k not in ("platforms", KEPT)}
    return hashlib.sha256(canonical(rest)).hexdigest()


def _blob(layout: Path, digest: str) -> bytes:
    data = blob_path(layout, digest).read_bytes()  # OCIError for anything but sha256
    if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        raise OCIError(f"blob {digest} does not match its digest")
    return data


def kept_platforms(layout: Path, identity: str, building: Sequence[str]) -> list[tuple[str, str]]:
    """(platform, manifest digest) of each image in `layout` a build of `building` keeps.

    Those are the platforms none of `building` matches, of an index annotated with
    `identity`; an index built from other inputs (or unreadable, or absent) keeps none.
    """
    try:
        wanted = [Platform.parse(p) for p in building]
        entries = _json.loads((layout / "index.json").read_bytes()).get("manifests") or []
        if len(entries) != 1 or not is_index(str(entries[0].get("mediaType", ""))):
            return []
        notes = entries[0].get("annotations") or {}
        if not isinstance(notes, dict) or notes.get(BUILD_NOTE) != identity:
            return []
        index = _json.loads(_blob(layout, str(entries[0]["digest"])))
        kept = []
        for entry in index.get("manifests") or []:
            found = entry.get("platform") or {}
            platform = Platform(
                str(found["os"]), str(found["architecture"]), str(found.get("variant") or "")
            )
            if not any(w.matches(platform) for w in wanted):
                kept.append((str(platform), str(entry["digest"])))
        return kept
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OCIError):
        return []


def with_kept(inputs: Inputs, layout: Path, platforms: Sequence[str]) -> dict[str, Value]:
    """`inputs` of an image action building `platforms` into `layout`, plus what it keeps."""
    kept = kept_platforms(layout, build_identity(inputs), platforms) if platforms else []
    return {**inputs, KEPT: [f"{platform}@{digest}" for platform, digest in kept]}
