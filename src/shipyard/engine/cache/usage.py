"""What the cache folder holds, part by part, against its limit (`shipyard cache info`).

The cache folder (`default_cache_dir`) holds what builds store there:

    v1/         the action cache: entries (actions/<key>.json) and the blobs they name
    oci/        base image blobs by digest (`shipyard.engine.cache.local.blob_store`), with small
                notes beside them (which gzip blob holds a tar, which layer chains
                were checked)
    manifests/  validated manifests (`shipyard.manifest.load_manifest`)

Anything else there is not shipyard's build cache (by default the folder is also
the parent of `zipapps/`, where zipapps run on this machine unpack their native
code, in use by running programs): it is shown, never pruned, and does not count
against the size limit.

Use is recorded in mtimes: an action entry is touched when it is a hit, a base
blob when a build uses it, a manifest when written; `shipyard.engine.cache.prune`
removes the least recently used first.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard._fs import TEMP_PREFIX, atomic_write
from shipyard.engine.cache.local import (
    ACTIONS,
    BASE_BLOBS,
    MANIFESTS,
    MAX_SIZE_ENV,
    METADATA,
    SDIST_WHEELS,
    ActionCache,
    cache_limit,
)

if TYPE_CHECKING:
    from shipyard.engine.cache.prune import PruneResult

__all__ = [
    "AutoPrune",
    "CacheInfo",
    "CachePart",
    "CacheUsage",
    "File",
    "cache_info",
    "human_size",
    "is_entry",
    "is_temporary",
    "listed",
    "usage",
]

_PARTS = {
    ACTIONS: "action cache",
    BASE_BLOBS: "base image blobs",
    MANIFESTS: "validated manifests",
    METADATA: "project metadata (PEP 517)",
    SDIST_WHEELS: "wheels built from locked sdists",
}
_HEX64 = re.compile(r"[0-9a-f]{64}")
_RECORD = "autoprune.json"  # in v1/: the last automatic look (ActionCache.auto_prune)


def human_size(size: int) -> str:
    """`160.2 MB` for people (powers of 1024, as --max-size reads them)."""
    value = float(size)
    for unit in ("bytes", "KB", "MB", "GB"):
        if value < 1024:
            return f"{size} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"


@dataclass(frozen=True)
class File:
    """A regular file of the cache folder: its path, size and last use (mtime)."""

    path: Path
    size: int
    mtime: float


def listed(folder: Path) -> list[File]:
    """Every regular file under `folder` (none when it is missing); files that vanish
    while they are listed (another build, another prune) are left out."""
    found: list[File] = []
    pending = [folder]
    while pending:
        try:
            listing = os.scandir(pending.pop())
        except OSError:
            continue
        with listing:
            for item in listing:
                try:
                    if item.is_dir(follow_symlinks=False):
                        pending.append(Path(item.path))
                        continue
                    st = item.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    found.append(File(Path(item.path), st.st_size, st.st_mtime))
    return found


@dataclass(frozen=True)
class CachePart:
    """One folder of the cache: what it is, what it holds and its size in bytes."""

    folder: str
    what: str
    counts: tuple[tuple[str, int], ...]
    size: int
    pruned: bool

    def describe(self) -> str:
        """`12 entries, 30 blobs`."""
        return ", ".join(f"{number} {name}" for name, number in self.counts)


@dataclass(frozen=True)
class CacheUsage:
    """Every part of a cache folder."""

    root: Path
    parts: tuple[CachePart, ...]

    @property
    def managed(self) -> int:
        """Bytes of the parts builds write (what prunes and the size limit cover)."""
        return sum(p.size for p in self.parts if p.pruned)

    @property
    def total(self) -> int:
        """Bytes of everything in the cache folder."""
        return sum(p.size for p in self.parts)


def _part(root: Path, folder: str) -> CachePart:
    files = listed(root / folder)
    size = sum(f.size for f in files)
    counts: tuple[tuple[str, int], ...]
    if folder == ACTIONS:
        entries = sum(1 for f in files if f.path.parent.name == "actions" and is_entry(f))
        blobs = sum(1 for f in files if f.path.parent.name == "blobs" and not is_temporary(f))
        counts = (("entries", entries), ("blobs", blobs))
    elif folder == BASE_BLOBS:
        blobs = sum(1 for f in files if _HEX64.fullmatch(f.path.name))
        notes = sum(1 for f in files if not _HEX64.fullmatch(f.path.name) and not is_temporary(f))
        counts = (("blobs", blobs), ("notes", notes))
    elif folder in (MANIFESTS, METADATA):
        counts = (("entries", sum(1 for f in files if is_entry(f))),)
    elif folder == SDIST_WHEELS:
        counts = (("wheels", sum(1 for f in files if f.path.suffix == ".whl")),)
    else:
        counts = (("files", len(files)),)
    what = _PARTS.get(folder, "not shipyard's build cache")
    return CachePart(folder, what, counts, size, folder in _PARTS)


def usage(root: Path) -> CacheUsage:
    """The parts of the cache folder `root`: the parts builds write, then any other."""
    try:
        others = sorted(p.name for p in root.iterdir() if p.name not in _PARTS)
    except OSError:
        others = []
    return CacheUsage(root, tuple(_part(root, folder) for folder in (*_PARTS, *others)))


def is_temporary(file: File) -> bool:
    """A temporary a build or prune is writing (or a killed one left)."""
    return file.path.name.startswith(TEMP_PREFIX)


def is_entry(file: File) -> bool:
    """An entry of the action cache, a validated manifest or project metadata."""
    return file.path.suffix == ".json" and not is_temporary(file)


@dataclass(frozen=True)
class AutoPrune:
    """The record of an automatic look at the cache's size after a build."""

    time: int  # seconds since the epoch
    size: int  # bytes of the parts builds write, before any prune
    limit: int
    removed_bytes: int | None  # None: under the limit, nothing pruned
    shared: bool  # another build held the cache: what it may use was kept

    @classmethod
    def looked(cls, size: int, limit: int, pruned: PruneResult | None) -> AutoPrune:
        """A look now that found `size` bytes and did `pruned`."""
        removed = None if pruned is None else pruned.removed_bytes
        return cls(int(time.time()), size, limit, removed, pruned is not None and pruned.shared)

    def save(self, root: Path) -> None:
        """Record it in the cache folder `root` (rewritten by every look: no fsync)."""
        data = json.dumps(dataclasses.asdict(self)).encode()
        atomic_write(root / ACTIONS / _RECORD, data, durable=False)

    @classmethod
    def load(cls, root: Path) -> AutoPrune | None:
        """The last look recorded in the cache folder `root`, or None."""
        try:
            record = json.loads((root / ACTIONS / _RECORD).read_bytes())
            removed = record.get("removed_bytes")
            return cls(
                int(record["time"]),
                int(record["size"]),
                int(record["limit"]),
                None if removed is None else int(removed),
                bool(record.get("shared", False)),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None


@dataclass(frozen=True)
class CacheInfo:
    """What `shipyard cache info` reports: each part, the limit and the last automatic look."""

    dir: Path
    usage: CacheUsage
    limit: int | None  # None: the automatic prune is off
    setting: str | None  # $SHIPYARD_CACHE_MAX_SIZE as set, if it is
    last: AutoPrune | None


def cache_info(cache_dir: Path, env: Mapping[str, str]) -> CacheInfo:
    """The parts of the cache folder `cache_dir`, its limit ($SHIPYARD_CACHE_MAX_SIZE,
    default 10G; UsageError when it does not read) and the last automatic prune."""
    cache = ActionCache(cache_dir)
    limit = cache_limit(env)
    return CacheInfo(
        cache.dir, cache.usage(), limit, env.get(MAX_SIZE_ENV), cache.last_auto_prune()
    )
