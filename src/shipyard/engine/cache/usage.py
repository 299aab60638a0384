"""What the cache folder holds, part by part, and pruning it by least recent use.

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
blob when a build uses it, a manifest when written. Pruning removes the least
recently used files of every part, oldest first, until the parts fit; a blob of
the action cache goes when no remaining entry names it. What a build running
elsewhere may hold is kept (see `ActionCache.prune` for the lock that tells).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from shipyard._fs import TEMP_PREFIX, atomic_write
from shipyard.engine.cache.local import ACTIONS, BASE_BLOBS, MANIFESTS, METADATA, SDIST_WHEELS

__all__ = [
    "AutoPrune",
    "CachePart",
    "CacheUsage",
    "PruneResult",
    "human_size",
    "prune_cache",
    "usage",
]

_log = logging.getLogger(__name__)

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
class _File:
    path: Path
    size: int
    mtime: float


def _files(folder: Path) -> list[_File]:
    """Every regular file under `folder` (none when it is missing); files that vanish
    while they are listed (another build, another prune) are left out."""
    found: list[_File] = []
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
                    found.append(_File(Path(item.path), st.st_size, st.st_mtime))
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
    files = _files(root / folder)
    size = sum(f.size for f in files)
    counts: tuple[tuple[str, int], ...]
    if folder == ACTIONS:
        entries = sum(1 for f in files if f.path.parent.name == "actions" and _entry(f))
        blobs = sum(1 for f in files if f.path.parent.name == "blobs" and not _temporary(f))
        counts = (("entries", entries), ("blobs", blobs))
    elif folder == BASE_BLOBS:
        blobs = sum(1 for f in files if _HEX64.fullmatch(f.path.name))
        notes = sum(1 for f in files if not _HEX64.fullmatch(f.path.name) and not _temporary(f))
        counts = (("blobs", blobs), ("notes", notes))
    elif folder in (MANIFESTS, METADATA):
        counts = (("entries", sum(1 for f in files if _entry(f))),)
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


@dataclass(frozen=True)
class PruneResult:
    """What `prune` removed and kept.

    `shared`: another build was using the cache, so base blobs (`oci/`) and
    blobs no entry names (perhaps one that build is storing) were kept.
    """

    removed_entries: int
    removed_bytes: int
    kept_bytes: int
    removed_files: int = 0
    shared: bool = False


def _temporary(file: _File) -> bool:
    return file.path.name.startswith(TEMP_PREFIX)


def _entry(file: _File) -> bool:
    return file.path.suffix == ".json" and not _temporary(file)


def _named(entry: Path) -> set[str]:
    """The blobs an action entry names (none when it is unreadable: it goes like any)."""
    try:
        outputs = json.loads(entry.read_bytes())["outputs"]
        return {o["sha256"] for o in outputs if isinstance(o.get("sha256"), str)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return set()


def _unlink(path: Path) -> bool:
    """Remove `path`; False when it could not be (gone already counts as removed)."""
    try:
        path.unlink()
    except FileNotFoundError:
        return True
    except OSError as exc:
        _log.warning("cache prune: cannot remove %s: %s", path, exc.strerror)
        return False
    return True


def prune_cache(root: Path, max_bytes: int, *, alone: bool) -> PruneResult:
    """Remove the least recently used files of every part of `root` until the parts
    fit in `max_bytes`.

    Units go oldest first (by mtime): an action entry (with the blobs no other
    entry names), a validated manifest, a base blob or note. A blob an entry that
    stays names is never removed. Unless `alone` (no other build holds the
    cache), the base blobs and the blobs no entry named before the prune began
    are kept: a running build may be using the first and storing the second.
    Temporaries are left to the sweep of a build or prune that is alone
    (`ActionCache.open`, `ActionCache.prune`).
    """
    total = usage(root).managed
    actions = root / ACTIONS / "actions"
    blobs = {f.path.name: f for f in _files(root / ACTIONS / "blobs") if not _temporary(f)}
    named: dict[Path, set[str]] = {}
    holders: dict[str, int] = {}
    units: list[tuple[float, str, _File]] = []
    for entry in _files(actions):
        if _entry(entry):
            named[entry.path] = _named(entry.path)
            for sha256 in named[entry.path]:
                holders[sha256] = holders.get(sha256, 0) + 1
            units.append((entry.mtime, "entry", entry))
    for manifest in (
        *_files(root / MANIFESTS),
        *_files(root / METADATA),
        *_files(root / SDIST_WHEELS),
    ):
        if not _temporary(manifest):
            units.append((manifest.mtime, "file", manifest))
    if alone:
        for name, blob in blobs.items():
            if not holders.get(name):
                units.append((float("-inf"), "file", blob))  # no entry names it: garbage
        for file in _files(root / BASE_BLOBS):
            if not _temporary(file):
                units.append((file.mtime, "file", file))
    units.sort(key=lambda unit: (unit[0], str(unit[2].path)))
    removed_entries = removed_files = removed_bytes = 0
    for _, kind, unit in units:
        if total <= max_bytes:
            break
        if not _unlink(unit.path):
            continue
        total -= unit.size
        removed_bytes += unit.size
        if kind == "file":
            removed_files += 1
            continue
        removed_entries += 1
        for sha256 in named[unit.path]:
            holders[sha256] -= 1
            freed = blobs.get(sha256)
            if holders[sha256] == 0 and freed is not None and _unlink(freed.path):
                total -= freed.size
                removed_bytes += freed.size
                removed_files += 1
    if alone and removed_files:
        for note in _dangling_notes(root / BASE_BLOBS / "sha256"):
            if _unlink(note.path):
                total -= note.size
                removed_bytes += note.size
                removed_files += 1
    return PruneResult(removed_entries, removed_bytes, total, removed_files, not alone)


def _dangling_notes(folder: Path) -> list[_File]:
    """The `.diff` notes whose gzip blob is gone (they could only ever miss)."""
    dangling = []
    for note in _files(folder):
        if note.path.suffix != ".diff":
            continue
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
            digest = str(json.loads(note.path.read_bytes())["digest"])
            if not (folder / digest.partition(":")[2]).is_file():
                dangling.append(note)
    return dangling


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
