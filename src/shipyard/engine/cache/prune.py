"""Pruning the cache folder by least recent use: after a build, and by `shipyard cache prune`.

Units go oldest first (by mtime): an action entry (with the blobs no other entry
names), a validated manifest, project metadata, a wheel built from an sdist, a base
blob or note. A blob an entry that stays names is never removed. What a build
running elsewhere may hold is kept (see `ActionCache.prune` for the lock that tells).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from shipyard.engine.cache.local import (
    ACTIONS,
    BASE_BLOBS,
    MANIFESTS,
    MAX_SIZE_ENV,
    METADATA,
    SDIST_WHEELS,
    ActionCache,
    cache_limit,
    parse_size,
)
from shipyard.engine.cache.usage import File, is_entry, is_temporary, listed, usage
from shipyard.errors import UsageError

__all__ = ["PruneResult", "prune_cache", "prune_to"]

_log = logging.getLogger(__name__)


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


def _named(entry: Path) -> set[str]:
    """The blobs an action entry names: each output's, or its pieces' when it is stored in
    pieces (none when the entry is unreadable: it goes like any)."""
    try:
        outputs = json.loads(entry.read_bytes())["outputs"]
        named = {o["sha256"] for o in outputs if isinstance(o.get("sha256"), str)}
        for output in outputs:
            for part in output.get("parts") or ():
                if isinstance(part, list) and part and isinstance(part[0], str):
                    named.add(part[0])
        return named
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


class _Entries:
    """The action cache's entries and blobs, and how many entries name each blob."""

    def __init__(self, folder: Path) -> None:
        self.blobs = {f.path.name: f for f in listed(folder / "blobs") if not is_temporary(f)}
        self.entries = [f for f in listed(folder / "actions") if is_entry(f)]
        self.named = {entry.path: _named(entry.path) for entry in self.entries}
        self.holders: dict[str, int] = {}
        for names in self.named.values():
            for sha256 in names:
                self.holders[sha256] = self.holders.get(sha256, 0) + 1

    def unnamed(self) -> list[File]:
        """The blobs no entry names: garbage, once no other build may be storing one."""
        return [blob for name, blob in self.blobs.items() if not self.holders.get(name)]

    def gone(self, entry: Path) -> list[File]:
        """The blobs that entry `entry`, now removed, was the last to name."""
        freed: list[File] = []
        for sha256 in self.named[entry]:
            self.holders[sha256] -= 1
            blob = self.blobs.get(sha256)
            if self.holders[sha256] == 0 and blob is not None:
                freed.append(blob)
        return freed


def _units(
    root: Path, entries: _Entries, *, alone: bool, keep_since: float | None
) -> list[tuple[float, bool, File]]:
    """Everything a prune may remove, oldest first: (mtime, is an entry, file). Base
    blobs and blobs no entry names only when `alone` (no other build holds the cache);
    nothing used since `keep_since`."""
    units = [(entry.mtime, True, entry) for entry in entries.entries]
    for folder in (MANIFESTS, METADATA, SDIST_WHEELS):
        units += [(f.mtime, False, f) for f in listed(root / folder) if not is_temporary(f)]
    if alone:
        units += [(float("-inf"), False, blob) for blob in entries.unnamed()]
        units += [(f.mtime, False, f) for f in listed(root / BASE_BLOBS) if not is_temporary(f)]
    if keep_since is not None:
        units = [unit for unit in units if unit[0] < keep_since]
    return sorted(units, key=lambda unit: (unit[0], str(unit[2].path)))


@dataclass
class _Tally:
    """What a prune has removed so far, and the bytes the parts still hold."""

    total: int
    entries: int = 0
    files: int = 0
    removed: int = 0

    def remove(self, file: File, *, entry: bool = False) -> None:
        """Count `file` as removed: an action entry, or any other file."""
        self.total -= file.size
        self.removed += file.size
        if entry:
            self.entries += 1
        else:
            self.files += 1


def prune_cache(
    root: Path, max_bytes: int, *, alone: bool, keep_since: float | None = None
) -> PruneResult:
    """Remove the least recently used files of every part of `root` until the parts
    fit in `max_bytes`; files used since `keep_since` (seconds since the epoch) stay,
    even over it.

    Unless `alone` (no other build holds the cache), the base blobs and the blobs no
    entry named before the prune began are kept: a running build may be using the
    first and storing the second. Temporaries are left to the sweep of a build or
    prune that is alone (`ActionCache.open`, `ActionCache.prune`).
    """
    tally = _Tally(usage(root).managed)
    entries = _Entries(root / ACTIONS)
    for _, is_entry_file, unit in _units(root, entries, alone=alone, keep_since=keep_since):
        if tally.total <= max_bytes:
            break
        if not _unlink(unit.path):
            continue
        tally.remove(unit, entry=is_entry_file)
        for blob in entries.gone(unit.path) if is_entry_file else ():
            if _unlink(blob.path):
                tally.remove(blob)
    if alone and tally.files:
        for note in _dangling_notes(root / BASE_BLOBS / "sha256"):
            if _unlink(note.path):
                tally.remove(note)
    return PruneResult(tally.entries, tally.removed, tally.total, tally.files, not alone)


def _dangling_notes(folder: Path) -> list[File]:
    """The `.diff` notes whose gzip blob is gone (they could only ever miss)."""
    dangling = []
    for note in listed(folder):
        if note.path.suffix != ".diff":
            continue
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
            digest = str(json.loads(note.path.read_bytes())["digest"])
            if not (folder / digest.partition(":")[2]).is_file():
                dangling.append(note)
    return dangling


def prune_to(
    cache_dir: Path, env: Mapping[str, str], max_size: str | None = None
) -> tuple[PruneResult, int]:
    """`shipyard cache prune`: prune the cache folder `cache_dir` to `max_size`
    (--max-size), else to its limit ($SHIPYARD_CACHE_MAX_SIZE, default 512M). Returns
    what was done and the size pruned to. UsageError (exit 2) for a size that does not
    read, or when the limit is off and no --max-size is given."""
    limit = cache_limit(env)
    if max_size:
        limit = parse_size(max_size, "--max-size")
    elif limit is None:
        raise UsageError(
            f"{MAX_SIZE_ENV}={env.get(MAX_SIZE_ENV)} turns the automatic prune off; "
            "give the size to prune to: shipyard cache prune --max-size=512M"
        )
    return ActionCache(cache_dir).prune(limit), limit
