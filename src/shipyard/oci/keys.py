"""What identifies an image's inputs without loading them: for action keys.

Kept apart from the layer and base modules (tar, gzip, layouts) because a no-op
build computes every image key and loads none of those; the base text is read by
the one parser the manifest validator uses (`basespec`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from shipyard._fs import sha256_file
from shipyard.oci.basespec import FILE_KINDS, BaseSpec, parse_base

__all__ = ["GZIP_LEVEL", "base_fingerprint"]

# Part of the output's identity: changing it changes every layer digest shipyard writes
# (base layers are never recompressed). 4, as for zipapps: on black's dependency layer
# (8.2 MiB of files) 160 ms of CPU where 6 took 360 ms, for 4% more bytes (2.59 MiB
# against 2.48); 1 saves 50 ms more for 14% more bytes, 9 takes 1.2 s for 1% less. Gzip,
# not zstd: `docker load` and every registry read it.
GZIP_LEVEL = 4


def base_fingerprint(base: str | BaseSpec, root: Path) -> str:
    """What identifies a base's content without loading it, for action keys.

    The base as parsed (`basespec`), plus a layout's index.json, an archive's or
    rootfs's bytes; a registry reference as written (resolving it would need the
    network). No base (empty text) has a fingerprint of its own.
    """
    if isinstance(base, str):
        if not base.strip():
            return hashlib.sha256(b"").hexdigest()
        base = parse_base(base)
    digest = hashlib.sha256(str(base).encode())
    for source in base.sources:
        if source.kind in FILE_KINDS:
            path = source.content_file(root)
            digest.update(sha256_file(path).encode() if path.is_file() else b"missing")
    return digest.hexdigest()
