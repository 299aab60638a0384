"""The files a shared-cache client placed or stored in this build, to copy, not download.

Actions share output files (image variants share their base layers), and actions
restore on several workers at once. A client of any protocol keeps a
`PlacedFiles`: a restore first looks for a file this build already placed or
stored with the bytes it needs (`known`), and holds the download lock of each
blob it has no such file for (`fetching`), so a second restore needing the same
blob waits for the first, then copies the file it placed instead of downloading
the bytes again. Whatever is copied is checked once more by `place_files`.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from shipyard._fs import TEMP_PREFIX, sha256_file
from shipyard.artifacts import Artifact

__all__ = ["PlacedFiles", "scratch"]


class PlacedFiles:
    """sha256 -> a file of this build that held those bytes; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[str, Path] = {}
        self._downloads: dict[str, threading.Lock] = {}

    def known(self, sha256: str, size: int) -> Path | None:
        """A file placed or stored in this build that still holds these bytes (it is
        hashed again: a later action may have changed it), or None."""
        with self._lock:
            path = self._files.get(sha256)
        if path is None:
            return None
        try:
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_size == size and sha256_file(path) == sha256:
                return path
        except OSError:
            pass
        return None

    def remember(self, artifacts: Iterable[Artifact]) -> None:
        """Files just placed or stored, for later restores to copy."""
        with self._lock:
            self._files.update((a.sha256, a.path) for a in artifacts)

    @contextlib.contextmanager
    def fetching(self, blobs: Iterable[str]) -> Iterator[None]:
        """Hold the download lock of each of `blobs` (sha256) no file is known for,
        always taken in one order, so two restores never wait for each other in a
        circle; `remember` what was placed before the block ends."""
        with self._lock:
            locks = [
                self._downloads.setdefault(sha256, threading.Lock())
                for sha256 in sorted(set(blobs))
                if sha256 not in self._files
            ]
        with contextlib.ExitStack() as held:
            for lock in locks:
                held.enter_context(lock)
            yield


def scratch(repo: Path) -> tempfile.TemporaryDirectory[str]:
    """Where a remote restore or store stages blobs: a temporary folder in `repo`/dist,
    swept by the next build if this one is killed."""
    dist = repo / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}remote-", dir=dist)
