"""The local action cache: outputs stored by content, looked up by action key.

Layout under the cache directory (all writes are temp-then-rename, so a killed
build leaves at worst an unreferenced temp file, never a half entry):

    v1/blobs/<sha256>        output file contents, or pieces of them
    v1/actions/<key>.json    the outputs of one action: path (repo-relative), sha256, size,
                             mode and the artifact's kind, binary, platform and metadata;
                             for a large tar, the pieces it is stored as ("parts": each
                             [sha256, size], `shipyard.engine.cache.pieces`)
    v1/.lock                 held shared by every build using the cache, and by
                             every process using the base blob store (oci/)
    v1/autoprune.json        the last automatic check of the cache's size (see auto_prune)

beside the other parts of the cache folder (`shipyard.engine.cache.usage`),
and, in each checkout (never in the cache, which other users may write):

    dist/.checked.json       outputs already in place and verified, by stat
                             (`shipyard.engine.cache.checked`)

Blobs are made durable before the entry that names them is written. Builds in
different checkouts may share one cache, so the temporaries a killed build left
are swept only by a build that finds no other holder of the lock.

The cache is kept under a size by least recent use (`prune`): after a build
that stored something (`auto_prune`, limit $SHIPYARD_CACHE_MAX_SIZE, default
512M; what that build used stays), and by `shipyard cache prune`. A prune that
finds the lock held by another process leaves alone what that process may be
using: see `prune` and `shipyard.engine.cache.lock`.

An entry is untrusted input (the cache folder may be shared): a restore writes
only what `shipyard.engine.cache.checks` allows; anything else is a miss, logged, and
the entry is removed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from platformdirs import user_cache_dir

from shipyard import _units as units
from shipyard._environ import CACHE_DIR, CACHE_MAX_SIZE
from shipyard._fs import (
    atomic_write,
    publish_file,
    sha256_file,
    sync_folder,
)
from shipyard.artifacts import Artifact
from shipyard.engine.cache.checked import CheckedOutputs, checked_file
from shipyard.engine.cache.checks import (
    Declared,
    RefusedEntry,
    checked_description,
    checked_mode,
    checked_parts,
    checked_path,
    checked_sha256,
    checked_size,
    stored_mode,
)
from shipyard.engine.cache.lock import CacheLock, hold_shared
from shipyard.engine.cache.pieces import store_pieces, tar_spans
from shipyard.engine.cache.restore import PlacedFile, place_files
from shipyard.engine.wrapper import OutputCache
from shipyard.errors import UsageError

if TYPE_CHECKING:  # measuring and pruning load only when a build stored something
    from shipyard.engine.cache.prune import PruneResult
    from shipyard.engine.cache.usage import AutoPrune, CacheUsage
    from shipyard.oci.layer import BlobStore

__all__ = [
    "DEFAULT_MAX_SIZE",
    "MAX_SIZE_ENV",
    "ActionCache",
    "OutputCache",
    "blob_store",
    "cache_limit",
    "default_cache_dir",
    "join_cache",
    "parse_size",
]

_log = logging.getLogger(__name__)


def default_cache_dir(flag: str | None, env: Mapping[str, str]) -> Path:
    """--cache-dir, else $SHIPYARD_CACHE_DIR, else the user cache directory (XDG)."""
    if flag:
        return Path(flag).expanduser().resolve()
    if env.get(CACHE_DIR.name):
        return Path(env[CACHE_DIR.name]).expanduser().resolve()
    return Path(user_cache_dir("shipyard"))


# The folders builds write in the cache folder (see shipyard.engine.cache.usage).
ACTIONS, BASE_BLOBS, MANIFESTS, METADATA = "v1", "oci", "manifests", "metadata"
SDIST_WHEELS = "sdist-wheels"  # wheels built from locked sdists, by the sdist's sha256
BUILD_ENVS = "build-envs"  # PEP 517 build environments, one per build-system.requires
# One full build of the example workspace (7 binaries, wheels, zipapps, images of 3
# variants) stores 371 MB, 211 MB of it the two binaries of issue 28; an edit to one
# project adds about 2 MB. A build's own entries are never pruned (`auto_prune`), so
# the limit only bounds the history kept beside them. Pants collects its whole store
# down to 4 GiB; Bazel's disk cache has no default limit.
DEFAULT_MAX_SIZE = 512 << 20
MAX_SIZE_ENV = CACHE_MAX_SIZE.name


def parse_size(text: str, where: str) -> int:
    """Bytes from `500M`, `10G`, `1048576` (the one grammar of `shipyard._units`: K, M,
    G, T are powers of 1024, kB, MB, GB powers of 1000).

    `where` names the flag or variable for the message (UsageError, exit 2).
    """
    try:
        return units.parse_size(text, bare=True)
    except ValueError as exc:
        raise UsageError(f"{where}={text}: give bytes or a size like 500M or 10G; {exc}") from None


def cache_limit(env: Mapping[str, str]) -> int | None:
    """The size builds keep the cache under: $SHIPYARD_CACHE_MAX_SIZE, else 512M.

    `off` (or `none`, `never`) turns the automatic prune off: None.
    """
    text = env.get(MAX_SIZE_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_SIZE
    if text.lower() in ("off", "none", "never"):
        return None
    return parse_size(text, MAX_SIZE_ENV)


def _lock_file(cache_dir: Path) -> Path:
    return cache_dir / ACTIONS / ".lock"


def join_cache(cache_dir: Path) -> None:
    """Hold the lock of the cache folder `cache_dir` shared for the rest of the process.

    For users of the cache other than ActionCache (the base blob store under
    oci/): while any process holds it, a prune elsewhere keeps the base blobs.
    Waits while a prune holds it alone (a prune takes moments).
    """
    hold_shared(_lock_file(cache_dir))


def blob_store(env: Mapping[str, str]) -> BlobStore:
    """The base image blob store in the cache: $SHIPYARD_CACHE_DIR/oci, else the user
    cache (XDG).

    The process joins the cache (holds its lock shared) for as long as it runs:
    blobs it has located stay while it may still read or link them, even with
    `--no-cache`, which only leaves the action cache out.
    """
    from shipyard.oci.layer import BlobStore  # the image builders' only: not on a no-op

    root = Path(env.get(CACHE_DIR.name) or user_cache_dir("shipyard")).expanduser()
    join_cache(root)
    return BlobStore(root / BASE_BLOBS)


class ActionCache:
    """Content-addressed store of action outputs."""

    def __init__(self, root: Path) -> None:
        self.dir = root
        self.root = root / ACTIONS
        self.blobs = self.root / "blobs"
        self.actions = self.root / "actions"
        self._lock = CacheLock(_lock_file(root))
        self._opening = threading.Lock()
        self._checked: dict[Path, CheckedOutputs] = {}
        self._stored = False  # since the last auto_prune: did this process add anything?
        self._since: float | None = None  # when this process first used the cache

    def _checked_for(self, repo: Path) -> CheckedOutputs:
        with self._opening:
            if repo not in self._checked:
                self._checked[repo] = CheckedOutputs(checked_file(repo))
            return self._checked[repo]

    def _entry(self, key: str) -> Path:
        return self.actions / f"{key}.json"

    def open(self) -> None:
        """Join the builds using this cache (done on first use; the lock lasts the process).

        The first user to find the cache idle sweeps the temporaries of killed
        builds; while any build holds the lock shared, its temporaries are live.
        """
        if self._since is None:
            self._since = time.time()
        self._lock.join()

    def close(self) -> None:
        """Leave the cache (a later use joins again)."""
        self._lock.leave()

    def restore(
        self, key: str, repo: Path, declared: Declared | None = None
    ) -> tuple[Artifact, ...] | None:
        """Put a hit's outputs back in place; None on a miss or a damaged entry.

        An entry naming a path outside `declared` (default: dist/), an odd mode
        or a malformed sha256, or whose blob holds other bytes, is a miss: it is
        logged and removed (with the bad blob), and nothing is written.
        """
        self.open()
        in_place = self._checked_for(repo).in_place(key, repo)
        if in_place is not None:
            try:
                # Recently used (pruned last); and only a key the cache holds is a hit,
                # so a new or emptied cache is filled, and a tiered one stays whole.
                os.utime(self._entry(key))
            except OSError:
                pass
            else:
                return in_place
        try:
            outputs = json.loads(self._entry(key).read_text())["outputs"]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._drop(key, RefusedEntry(f"unreadable ({type(exc).__name__}: {exc})"))
            return None
        try:
            files = self._files(outputs, declared or Declared.dist())
        except RefusedEntry as exc:
            self._drop(key, exc)
            return None
        if not all(_size(blob) == size for f in files for blob, size in f.blobs()):
            return None  # a blob pruned meanwhile: an ordinary miss
        checked = self._checked_for(repo)

        def holds(target: Path, sha256: str, size: int) -> bool:
            return checked.holds(target, sha256, size) or sha256_file(target) == sha256

        try:
            restored, seen = place_files(repo, files, holds)
        except RefusedEntry as exc:
            self._drop(key, exc)
            return None
        checked.note(seen)
        with contextlib.suppress(OSError):  # pruned meanwhile: the outputs are in place
            os.utime(self._entry(key))  # recently used: pruned last
        return restored

    def _files(self, outputs: object, declared: Declared) -> list[PlacedFile]:
        """The checked outputs of an entry; RefusedEntry for anything a store never writes."""
        if not isinstance(outputs, list):
            raise RefusedEntry("its outputs are not a list")
        files: list[PlacedFile] = []
        for output in outputs:
            if not isinstance(output, dict):
                raise RefusedEntry("an output is not an object")
            sha256 = checked_sha256(output.get("sha256"))
            size = checked_size(output.get("size"))
            parts = checked_parts(output.get("parts"), size)
            files.append(
                PlacedFile(
                    self.blobs / sha256,
                    checked_path(output.get("path"), declared),
                    sha256,
                    size,
                    checked_mode(output.get("mode", 0o644)),
                    checked_description(output.get("artifact"), declared),
                    tuple((self.blobs / digest, length) for digest, length in parts),
                    link=True,  # a blob that is this user's own, with the output's mode
                )
            )
        return files

    def _drop(self, key: str, reason: RefusedEntry) -> None:
        """Log why the entry `key` is not used and remove it (and a blob with other bytes)."""
        _log.warning(
            "local cache entry %s ignored and removed: %s; building the action instead",
            self._entry(key),
            reason,
        )
        with contextlib.suppress(OSError):
            self._entry(key).unlink()
        if reason.blob is not None and reason.blob.parent == self.blobs:
            with contextlib.suppress(OSError):
                reason.blob.unlink()

    def store(self, key: str, outputs: tuple[Artifact, ...], repo: Path) -> None:
        """Record an action's outputs under its key: durable blobs first, then the entry."""
        self.open()
        self._stored = True
        listed: list[dict[str, object]] = []
        for artifact in outputs:
            output: dict[str, object] = {
                "path": str(artifact.path.relative_to(repo)),
                "sha256": artifact.sha256,
                "size": artifact.size,
                "mode": stored_mode(artifact.path),  # a zipapp stays executable
                "artifact": artifact.describe(),
            }
            spans = tar_spans(artifact.path)
            if spans is not None:  # an image archive: its layers are stored once
                pieces = store_pieces(artifact.path, spans, self.blobs)
                output["parts"] = [[digest, length] for digest, length in pieces]
            elif _size(self.blobs / artifact.sha256) != artifact.size:
                publish_file(artifact.path, self.blobs / artifact.sha256)
            listed.append(output)
        self._checked_for(repo).note([(a.path, a.sha256) for a in outputs])
        if outputs:
            sync_folder(self.blobs)  # the blobs' names outlive a power cut before the entry's
        entry = {"key": key, "stored": int(time.time()), "outputs": listed}
        atomic_write(self._entry(key), json.dumps(entry, indent=1).encode())

    def size(self) -> int:
        """Bytes used by every part builds write: entries, blobs, base blobs, manifests."""
        return self.usage().managed

    def usage(self) -> CacheUsage:
        """What each part of the cache folder holds (`shipyard cache info`)."""
        from shipyard.engine.cache.usage import usage

        return usage(self.dir)

    def prune(self, max_bytes: int, *, keep_since: float | None = None) -> PruneResult:
        """Remove least recently used entries, base blobs and manifests until they fit.

        Alone (no other process holds the lock), every part is pruned and the
        temporaries of killed builds are swept. Otherwise another build may be
        using base blobs it has located and storing blobs whose entry is not yet
        written: those are kept (`PruneResult.shared`), and entries and
        manifests are pruned, whose readers take a vanished file as a miss. A
        blob an entry that stays names is always kept, and so is every file used
        since `keep_since` (seconds since the epoch), even over `max_bytes`.
        """
        from shipyard.engine.cache.prune import prune_cache

        with self._lock.alone(self.root, self.dir / BASE_BLOBS) as alone:
            return prune_cache(self.dir, max_bytes, alone=alone, keep_since=keep_since)

    def auto_prune(self, limit: int | None) -> PruneResult | None:
        """After a build: if it stored anything and the cache has grown past `limit`,
        prune to `limit` (None: never), keeping what this process used (entries it hit
        or stored, base blobs, manifests: touched since it first opened the cache, so
        the next build of the same commit is all hits whatever the limit). Returns
        what a prune did, else None.

        A build that stored nothing (a no-op) does not even look. Each look is
        recorded in v1/autoprune.json (`shipyard cache info` shows it); an error
        is logged, never raised: the build is done.
        """
        if limit is None or not self._stored:
            return None
        self._stored = False
        from shipyard.engine.cache.usage import AutoPrune

        try:
            size = self.size()
            since = None if self._since is None else self._since - _CLOCK_SLACK
            pruned = self.prune(limit, keep_since=since) if size > limit else None
            AutoPrune.looked(size, limit, pruned).save(self.dir)
        except OSError as exc:
            _log.warning("could not prune the cache %s to its limit: %s", self.dir, exc)
            return None
        return pruned

    def last_auto_prune(self) -> AutoPrune | None:
        """What the last `auto_prune` that looked found and did, or None."""
        from shipyard.engine.cache.usage import AutoPrune

        return AutoPrune.load(self.dir)


# File times may lag the clock a little (a coarse kernel clock): a file used just after
# the build began must not look older than its start.
_CLOCK_SLACK = 1.0


def _size(path: Path) -> int | None:
    """The size of the file at `path`, or None when there is none."""
    try:
        return path.stat().st_size
    except OSError:
        return None
