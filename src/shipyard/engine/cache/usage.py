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
from shipyard.artifacts import KINDS
from shipyard.engine.cache.local import (
    ACTIONS,
    BASE_BLOBS,
    BUILD_ENVS,
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
    "BlobUse",
    "CacheContents",
    "CacheInfo",
    "CachePart",
    "CacheUsage",
    "EntryUse",
    "File",
    "KindUse",
    "cache_info",
    "contents",
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
# Parts builds write that a prune leaves alone: few, and each is reused as a whole.
_KEPT = {BUILD_ENVS: "PEP 517 build environments (never pruned; remove to refresh)"}
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
    elif folder == BUILD_ENVS:
        made = {f.path.parent for f in files if f.path.name == "shipyard-pins.json"}
        counts = (("environments", len(made)),)
    else:
        counts = (("files", len(files)),)
    what = _PARTS.get(folder) or _KEPT.get(folder, "not shipyard's build cache")
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
class KindUse:
    """The outputs of one kind (wheel, zipapp, image-layout, image-archive, ...) in the
    action cache: how many, their bytes as restored, and the bytes of the blobs counted
    under this kind (each blob once, under the first kind in `KINDS` order that names
    it: an archive's layers count under the image layout that holds them too)."""

    kind: str
    outputs: int
    logical: int
    stored: int


@dataclass(frozen=True)
class EntryUse:
    """One action entry: what it made, its outputs' bytes as restored, and the bytes of
    the blobs no other entry names (what removing it frees)."""

    key: str
    made: str  # `image mesh-agent`, `wheel`
    logical: int
    own: int


@dataclass(frozen=True)
class BlobUse:
    """One blob of the action cache: its size, how many entries and which kinds name it."""

    sha256: str
    size: int
    entries: int
    kinds: tuple[str, ...]


@dataclass(frozen=True)
class CacheContents:
    """What the action cache's entries hold (`shipyard cache info`): the bytes their
    outputs add up to as restored (`logical`) against the bytes of the blobs they name,
    each stored once (`stored`); by kind, largest first; the largest entries and blobs."""

    entries: int
    logical: int
    stored: int
    unnamed: int  # bytes of blobs no entry names (a store under way, or garbage)
    kinds: tuple[KindUse, ...]
    largest_entries: tuple[EntryUse, ...]
    largest_blobs: tuple[BlobUse, ...]

    @property
    def saved(self) -> int:
        """Bytes that storing each identical blob once saves."""
        return self.logical - self.stored


def _outputs(path: Path) -> list[tuple[str, str, int, list[tuple[str, int]]]]:
    """(kind, binary, size, blobs) of each output an entry lists; [] when it does not read
    (an entry is untrusted: only what has the right shape counts)."""
    try:
        outputs = json.loads(path.read_bytes())["outputs"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    found = []
    for output in outputs if isinstance(outputs, list) else ():
        if not isinstance(output, dict):
            continue
        about = output.get("artifact")
        about = about if isinstance(about, dict) else {}
        sha256, size, parts = output.get("sha256"), output.get("size"), output.get("parts")
        if not isinstance(sha256, str) or not isinstance(size, int):
            continue
        blobs = [(sha256, size)]
        if isinstance(parts, list):
            blobs = [
                (p[0], p[1])
                for p in parts
                if isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)
                if isinstance(p[1], int)
            ]
        kind, binary = about.get("kind"), about.get("binary")
        found.append((str(kind or "?"), str(binary or ""), size, blobs))
    return found


def _kind_order(kind: str) -> tuple[int, str]:
    return (KINDS.index(kind) if kind in KINDS else len(KINDS), kind)


def contents(root: Path, top: int = 5) -> CacheContents:
    """What the entries of the action cache in the cache folder `root` hold, with the
    `top` largest entries (as restored) and blobs."""
    folder = root / ACTIONS
    sizes = {f.path.name: f.size for f in listed(folder / "blobs") if not is_temporary(f)}
    entries = [f for f in listed(folder / "actions") if is_entry(f)]
    holders: dict[str, set[str]] = {}  # blob -> entries naming it
    kinds_of: dict[str, set[str]] = {}  # blob -> kinds naming it
    per_kind: dict[str, list[int]] = {}  # kind -> [outputs, logical]
    made: dict[str, tuple[str, int, set[str]]] = {}  # key -> (made, logical, blobs)
    for entry in entries:
        key = entry.path.stem
        outputs = _outputs(entry.path)
        named: set[str] = set()
        for kind, _, size, pieces in outputs:
            tally = per_kind.setdefault(kind, [0, 0])
            tally[0] += 1
            tally[1] += size
            for sha256, _ in pieces:
                holders.setdefault(sha256, set()).add(key)
                kinds_of.setdefault(sha256, set()).add(kind)
                named.add(sha256)
        first = min((o[0] for o in outputs), key=_kind_order, default="?")
        binary = next((o[1] for o in outputs if o[1]), "")
        what = first.partition("-")[0] if first.startswith("image") else first
        made[key] = (f"{what} {binary}".strip(), sum(o[2] for o in outputs), named)
    stored_by_kind: dict[str, int] = {}
    for sha256, naming in kinds_of.items():
        owner = min(naming, key=_kind_order)
        stored_by_kind[owner] = stored_by_kind.get(owner, 0) + sizes.get(sha256, 0)
    kinds = sorted(
        (KindUse(k, n, logical, stored_by_kind.get(k, 0)) for k, (n, logical) in per_kind.items()),
        key=lambda use: (-use.stored, -use.logical, use.kind),
    )
    uses = [
        EntryUse(
            key,
            what,
            logical,
            sum(sizes.get(b, 0) for b in named if len(holders[b]) == 1),
        )
        for key, (what, logical, named) in made.items()
    ]
    blobs = [
        BlobUse(
            sha256,
            sizes[sha256],
            len(holders[sha256]),
            tuple(sorted(kinds_of[sha256], key=_kind_order)),
        )
        for sha256 in holders
        if sha256 in sizes
    ]
    return CacheContents(
        entries=len(entries),
        logical=sum(use.logical for use in uses),
        stored=sum(blob.size for blob in blobs),
        unnamed=sum(size for sha256, size in sizes.items() if sha256 not in holders),
        kinds=tuple(kinds),
        largest_entries=tuple(sorted(uses, key=lambda u: (-u.logical, u.key))[:top]),
        largest_blobs=tuple(sorted(blobs, key=lambda b: (-b.size, b.sha256))[:top]),
    )


@dataclass(frozen=True)
class CacheInfo:
    """What `shipyard cache info` reports: each part, what the action cache's entries
    hold, the limit and the last automatic look."""

    dir: Path
    usage: CacheUsage
    limit: int | None  # None: the automatic prune is off
    setting: str | None  # $SHIPYARD_CACHE_MAX_SIZE as set, if it is
    last: AutoPrune | None
    contents: CacheContents


def cache_info(cache_dir: Path, env: Mapping[str, str]) -> CacheInfo:
    """The parts of the cache folder `cache_dir`, its limit ($SHIPYARD_CACHE_MAX_SIZE,
    default 512M; UsageError when it does not read) and the last automatic prune."""
    cache = ActionCache(cache_dir)
    limit = cache_limit(env)
    return CacheInfo(
        cache.dir,
        cache.usage(),
        limit,
        env.get(MAX_SIZE_ENV),
        cache.last_auto_prune(),
        contents(cache.dir),
    )
