"""What identifies an image's inputs without loading them: for action keys.

Kept apart from the layer and base modules (tar, gzip, the OCI model) because a
no-op build computes every image key and loads none of those.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from shipyard._fs import sha256_file

__all__ = ["GZIP_LEVEL", "base_fingerprint"]

# Part of the output's identity: changing it changes every layer digest.
GZIP_LEVEL = 6


def base_fingerprint(text: str, root: Path) -> str:
    """What identifies a base's content without loading it, for action keys.

    A layout's index.json, an archive's or rootfs's bytes; a registry reference
    as written (resolving it would need the network).
    """
    digest = hashlib.sha256(text.encode())
    for source in (s.strip() for s in text.split(",") if s.strip()):
        kind, _, rest = source.partition(":")
        path = root / rest.rpartition(";")[0] if kind == "rootfs" else root / rest
        if kind == "oci-layout":
            path = path / "index.json"
        if kind in ("oci-layout", "docker-archive", "rootfs"):
            digest.update(sha256_file(path).encode() if path.is_file() else b"missing")
    return digest.hexdigest()
