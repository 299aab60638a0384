"""The local action cache: outputs stored by content, looked up by action key.

Layout under the cache directory (all writes are temp-then-rename, so a killed
build leaves at worst an unreferenced temp file, never a half entry):

    v1/blobs/<sha256>        output file contents
    v1/actions/<key>.json    the outputs of one action: path (repo-relative), sha256, size
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from platformdirs import user_cache_dir

from shipyard._fs import atomic_write, publish_file, sha256_file
from shipyard.build.engine import Artifact, BuildContext, Builder, Outcome
from shipyard.build.plan import Action

__all__ = ["ActionCache", "CachingBuilder", "OutputCache", "PruneResult", "default_cache_dir"]


def default_cache_dir(flag: str | None, env: Mapping[str, str]) -> Path:
    """--cache-dir, else $SHIPYARD_CACHE_DIR, else the user cache directory (XDG)."""
    if flag:
        return Path(flag).expanduser().resolve()
    if env.get("SHIPYARD_CACHE_DIR"):
        return Path(env["SHIPYARD_CACHE_DIR"]).expanduser().resolve()
    return Path(user_cache_dir("shipyard"))


@dataclass(frozen=True)
class PruneResult:
    """What `prune` removed and kept."""

    removed_entries: int
    removed_bytes: int
    kept_bytes: int


class ActionCache:
    """Content-addressed store of action outputs."""

    def __init__(self, root: Path) -> None:
        self.root = root / "v1"
        self.blobs = self.root / "blobs"
        self.actions = self.root / "actions"

    def _entry(self, key: str) -> Path:
        return self.actions / f"{key}.json"

    def restore(self, key: str, repo: Path) -> tuple[Artifact, ...] | None:
        """Put a hit's outputs back in place; None on a miss or a damaged entry."""
        try:
            entries = json.loads(self._entry(key).read_text())["outputs"]
        except (OSError, ValueError, KeyError):
            return None
        blobs = [(self.blobs / e["sha256"], e) for e in entries]
        if not all(blob.is_file() for blob, _ in blobs):
            return None
        restored: list[Artifact] = []
        for blob, entry in blobs:
            target = repo / entry["path"]
            if not (
                target.is_file()
                and target.stat().st_size == entry["size"]
                and sha256_file(target) == entry["sha256"]
            ):
                publish_file(blob, target, entry.get("mode", 0o644))
            restored.append(Artifact(target, entry["sha256"], entry["size"]))
        os.utime(self._entry(key))  # recently used: pruned last
        return tuple(restored)

    def store(self, key: str, outputs: tuple[Artifact, ...], repo: Path) -> None:
        """Record an action's outputs under its key (blobs first, then the entry)."""
        for artifact in outputs:
            blob = self.blobs / artifact.sha256
            if not blob.is_file():
                publish_file(artifact.path, blob)
        entry = {
            "key": key,
            "stored": int(time.time()),
            "outputs": [
                {
                    "path": str(a.path.relative_to(repo)),
                    "sha256": a.sha256,
                    "size": a.size,
                    "mode": a.path.stat().st_mode & 0o755,  # a zipapp stays executable
                }
                for a in outputs
            ],
        }
        atomic_write(self._entry(key), json.dumps(entry, indent=1).encode())

    def size(self) -> int:
        """Bytes used by blobs and entries."""
        return sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file())

    def prune(self, max_bytes: int) -> PruneResult:
        """Drop least recently used entries until the cache fits, then unreferenced blobs."""
        entries = sorted(self.actions.glob("*.json"), key=lambda p: p.stat().st_mtime)
        removed = removed_bytes = 0
        while entries and self.size() > max_bytes:
            oldest = entries.pop(0)
            removed_bytes += oldest.stat().st_size
            oldest.unlink()
            removed += 1
            referenced = {
                o["sha256"] for e in entries for o in json.loads(e.read_text())["outputs"]
            }
            for blob in self.blobs.glob("*"):
                if blob.name not in referenced:
                    removed_bytes += blob.stat().st_size
                    blob.unlink()
        return PruneResult(removed, removed_bytes, self.size() if self.root.exists() else 0)


class OutputCache(Protocol):
    """What CachingBuilder needs of a cache."""

    def restore(self, key: str, repo: Path) -> tuple[Artifact, ...] | None:
        """Put a hit's outputs in place under `repo`; None on a miss."""
        ...

    def store(self, key: str, outputs: tuple[Artifact, ...], repo: Path) -> None:
        """Record the outputs of the action `key`."""
        ...


class CachingBuilder:
    """Wraps a builder: a key already in the cache restores outputs and runs nothing."""

    def __init__(self, inner: Builder, cache: OutputCache, *, force: bool = False) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.cache = cache
        self.force = force

    def key(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> str:
        """The wrapped builder's key."""
        return self.inner.key(action, ctx, deps)

    def build(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Outcome:
        """Restore on a hit (unless forced); otherwise build and store."""
        key = self.inner.key(action, ctx, deps)
        if not self.force:
            restored = self.cache.restore(key, ctx.root)
            if restored is not None:
                return Outcome(key, restored, cached=True)
        outcome = self.inner.build(action, ctx, deps)
        self.cache.store(key, outcome.outputs, ctx.root)
        return outcome
