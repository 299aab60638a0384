"""Digests of files remembered by their stat facts, as git's index remembers them.

A no-op build would otherwise read every source file to hash it and every
output in dist/ to learn it is in place. A file whose size, mtime, ctime and
inode are what they were when it was hashed is taken to hold the same bytes:
any write, rename or chmod changes at least one of them.

The one hole is git's "racily clean" case: a file rewritten with the same size
within the file system's timestamp granularity of the moment it was hashed
keeps its facts. A memo made with `settle_ns` therefore records only files
whose mtime and ctime are at least that old; a younger one is hashed again
next time. Outputs shipyard itself has just written and checked need no such
wait (`settle_ns=0`).

The memo lives in the checkout's dist/, never in a shared cache folder: whoever
can write it could make a stale file pass, unhashed, for other bytes, and only
who can already write dist/ (and so the files themselves) can write it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from shipyard._fs import atomic_write

__all__ = ["StatMemo"]

_Facts = tuple[int, int, int, int]


def _facts(st: os.stat_result) -> _Facts:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


class StatMemo:
    """Path -> digest, valid while the file's stat facts are unchanged. Thread-safe."""

    def __init__(self, path: Path, *, settle_ns: int = 0) -> None:
        self.path = path
        self.settle_ns = settle_ns
        self._lock = threading.Lock()
        self._data: dict[str, list[int | str]] | None = None
        self._changed = False

    def _loaded(self) -> dict[str, list[int | str]]:
        if self._data is None:
            try:
                loaded = json.loads(self.path.read_bytes())
                self._data = loaded if isinstance(loaded, dict) else {}
            except (OSError, ValueError):
                self._data = {}
        return self._data

    def lookup(self, name: str, st: os.stat_result) -> str | None:
        """The digest recorded for `name` if its facts are still `st`'s, else None."""
        with self._lock:
            entry = self._loaded().get(name)
        if not isinstance(entry, list) or len(entry) != 5:
            return None
        if tuple(entry[:4]) != _facts(st) or not isinstance(entry[4], str):
            return None
        return entry[4]

    def record(self, name: str, st: os.stat_result, digest: str) -> None:
        """Remember that `name`, with the facts `st`, holds `digest` (unless too young)."""
        if self.settle_ns:
            oldest = time.time_ns() - self.settle_ns
            if st.st_mtime_ns > oldest or st.st_ctime_ns > oldest:
                return
        entry: list[int | str] = [*_facts(st), digest]
        with self._lock:
            data = self._loaded()
            if data.get(name) != entry:
                data[name] = entry
                self._changed = True

    def save(self) -> None:
        """Write the memo if anything was recorded since it was read or saved."""
        with self._lock:
            if not self._changed or self._data is None:
                return
            text = json.dumps(self._data, sort_keys=True, separators=(",", ":"))
            self._changed = False
        atomic_write(self.path, text.encode(), durable=False)  # a lost memo only costs hashing
