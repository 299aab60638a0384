"""Outputs already in place and verified, remembered by stat in the checkout's dist/.

A no-op build would otherwise hash every output in dist/ (hundreds of MB of image
tarballs) to learn that it is already in place.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from shipyard.artifacts import Artifact
from shipyard.dist import dist_dir, report_file
from shipyard.engine.report import reported_outputs
from shipyard.files.statcache import StatMemo

__all__ = ["CheckedOutputs", "checked_file"]


def checked_file(repo: Path) -> Path:
    """Where the checkout at `repo` records the outputs verified in place (`CheckedOutputs`)."""
    return dist_dir(repo) / ".checked.json"


class CheckedOutputs:
    """Outputs known to hold their recorded bytes, by their stat facts (`StatMemo`).

    Builds in one checkout take turns (dist/.lock), so one record per checkout
    suffices; it lives in the checkout's dist/ (`checked_file`), not in the cache
    folder, which others may write.
    """

    def __init__(self, path: Path) -> None:
        self.memo = StatMemo(path)
        self._lock = threading.Lock()
        self._last: dict[str, list[object]] | None = None

    def last_outputs(self, key: str) -> list[object] | None:
        """The outputs the checkout's last build reported for the action `key` (its
        dist/report.json, which only who can write dist/ can write), or None."""
        with self._lock:
            if self._last is None:
                self._last = reported_outputs(report_file(self.memo.path.parent))
        return self._last.get(key)

    def holds(self, target: Path, sha256: str, size: int) -> bool:
        """True if `target` was seen with `sha256` and has not changed since."""
        try:
            st = target.stat()
        except OSError:
            return False
        return st.st_size == size and self.memo.lookup(str(target), st) == sha256

    def note(self, targets: list[tuple[Path, str]]) -> None:
        """Record that each target now holds its sha256 (it was just written or hashed)."""
        for target, sha256 in targets:
            with contextlib.suppress(OSError):
                self.memo.record(str(target), target.stat(), sha256)
        self.memo.save()

    def in_place(self, key: str, repo: Path) -> tuple[Artifact, ...] | None:
        """The outputs of `key` when the checkout's last build made or restored them
        and each is still in place unchanged (by stat): the no-op build's path, which
        reads neither the cache entry nor its blobs."""
        reported = self.last_outputs(key)
        if not reported:
            return None
        try:
            artifacts = tuple(Artifact.from_json(o, repo) for o in reported)
        except ValueError:
            return None
        dist = str(dist_dir(repo)) + "/"
        if all(
            str(a.path).startswith(dist)
            and ".." not in a.path.parts
            and self.holds(a.path, a.sha256, a.size)
            for a in artifacts
        ):
            return artifacts
        return None
