"""Atomic file output and hashing: an output appears whole or not at all."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "TEMP_PREFIX",
    "atomic_write",
    "exclusive",
    "publish_file",
    "remove_stale_temps",
    "sha256_file",
    "sync_folder",
]

# Every temporary file or folder shipyard makes next to an output starts with
# this, so the next build can sweep what a killed one left behind.
TEMP_PREFIX = ".tmp-"


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _commit(tmp: str, path: Path, mode: int, *, durable: bool = True) -> None:
    """Make the finished temporary `tmp` durable, give it `mode` and rename it to `path`.

    The fsync comes before the rename: otherwise a power cut could leave `path`
    named but empty, and a cache entry written after it would point at nothing.
    """
    if durable:
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _temporary(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{TEMP_PREFIX}{path.name}.")
    os.close(fd)
    return tmp


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write `data` to `path` through a temporary file in the same folder and a rename.

    `durable=False` skips the fsync (2 ms or more a file): for records a build
    rewrites every time and reads back as "none" when unreadable (reports,
    memos), which a power cut may empty but a crash cannot tear.
    """
    tmp = _temporary(path)
    try:
        Path(tmp).write_bytes(data)
        _commit(tmp, path, 0o644, durable=durable)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def publish_file(source: Path, path: Path, mode: int = 0o644) -> None:
    """Copy a finished file into place atomically, with `mode`."""
    tmp = _temporary(path)
    try:
        shutil.copyfile(source, tmp)
        _commit(tmp, path, mode)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sync_folder(folder: Path) -> None:
    """Make the renames done in `folder` durable (before writing what refers to them)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_stale_temps(root: Path) -> int:
    """Delete temporaries left under `root` by a killed build.

    Call only while holding the lock that keeps live writers out of `root`: the
    build lock for dist/, the cache's lock (held alone) for the cache.
    """
    removed = 0
    if not root.is_dir():
        return 0
    for folder, dirs, files in os.walk(root):
        for name in [d for d in dirs if d.startswith(TEMP_PREFIX)]:
            shutil.rmtree(Path(folder) / name, ignore_errors=True)
            dirs.remove(name)
            removed += 1
        for name in files:
            if name.startswith(TEMP_PREFIX):
                (Path(folder) / name).unlink(missing_ok=True)
                removed += 1
    return removed


@contextlib.contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive lock on `lock_file` (waits for another holder to finish).

    Two builds started at once in one checkout take turns instead of writing the
    same outputs together; the second then finds cache hits.
    """
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with lock_file.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
