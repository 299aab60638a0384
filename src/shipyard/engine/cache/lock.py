"""The cache folder's lock (v1/.lock): held shared by every build and every other user
of the cache (the base blob store), taken alone by a prune.

The first user to find the cache idle sweeps the temporaries killed builds left;
while any process holds the lock shared, its temporaries are live. A prune that
finds the lock held elsewhere keeps what that process may be using.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from shipyard._fs import remove_stale_temps

__all__ = ["CacheLock", "hold_shared", "release_shared"]

# Lock handles of processes using the cache without an ActionCache (the base blob
# store), by lock file: held shared until the process ends or prunes.
_held: dict[Path, IO[str]] = {}
_holding = threading.Lock()


def hold_shared(lock: Path) -> None:
    """Hold the lock file `lock` shared for the rest of the process (once however often
    asked); waits while a prune holds it alone (a prune takes moments)."""
    real = Path(os.path.realpath(lock))
    with _holding:
        if real in _held:
            return
        real.parent.mkdir(parents=True, exist_ok=True)
        handle = real.open("a")
        fcntl.flock(handle.fileno(), fcntl.LOCK_SH)
        _held[real] = handle


def release_shared(lock: Path) -> None:
    """Drop this process's `hold_shared` hold on `lock` (a prune's own process)."""
    with _holding:
        handle = _held.pop(Path(os.path.realpath(lock)), None)
    if handle is not None:
        handle.close()


class CacheLock:
    """One user's hold on the lock file `lock`: joined on first use, for the process."""

    def __init__(self, lock: Path) -> None:
        self.lock = lock
        self._handle: IO[str] | None = None
        self._opening = threading.Lock()

    def join(self) -> None:
        """Hold the lock shared (done once); sweep its folder's temporaries when no other
        process holds it."""
        with self._opening:
            if self._handle is not None:
                return
            self.lock.parent.mkdir(parents=True, exist_ok=True)
            handle = self.lock.open("a")
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass  # another build is using the cache
            else:
                remove_stale_temps(self.lock.parent)
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH)
            self._handle = handle

    def leave(self) -> None:
        """Drop the hold (a later use joins again)."""
        with self._opening:
            if self._handle is not None:
                self._handle.close()  # closing the file drops the lock
                self._handle = None

    @contextlib.contextmanager
    def alone(self, *swept: Path) -> Iterator[bool]:
        """Hold the lock alone if no other process holds it: True, and the temporaries
        in the folders `swept` are swept; else False.

        This process's own holds are dropped first (a later use joins again): a build
        prunes after its work is done.
        """
        self.leave()
        release_shared(self.lock)
        self.lock.parent.mkdir(parents=True, exist_ok=True)
        with self.lock.open("a") as handle:  # closing it drops the lock
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                alone = False
            else:
                alone = True
                for folder in swept:
                    remove_stale_temps(folder)
            yield alone
