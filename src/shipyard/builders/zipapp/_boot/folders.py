"""The cache's private folders and their locks.

Folders are made private to this user (mode 0700). A temporary folder (being
unpacked, or a private site) is locked by the process that fills or runs it; an
unlocked one is a killed start's leftover, which the next start sweeps. On Windows
folders cannot be opened and locked: the lock is an msvcrt byte lock on a lock file
beside the folder.
"""

from __future__ import annotations

import os

from .host import BINARY, NOFOLLOW, is_posix, user_id

__all__ = ["LOCK_SUFFIX", "fsync", "locked_temp", "makedirs", "release", "sweep"]

# Beside a temporary folder on Windows (directories cannot be opened and locked there).
LOCK_SUFFIX = ".lock"


def makedirs(path: str) -> None:
    """Make `path` and its missing parents, each private to this user (mode 0700)."""
    parent = os.path.dirname(path)
    if parent != path and not os.path.isdir(parent):
        makedirs(parent)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not os.path.isdir(path):
            raise


def _lock(fd: int, *, wait: bool) -> None:
    """Lock the open file `fd` exclusively; OSError when `wait` is false and it is held."""
    if is_posix():
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    else:
        import msvcrt

        # A byte lock on the first byte; LK_LOCK retries for 10 s, then raises OSError.
        msvcrt.locking(fd, msvcrt.LK_LOCK if wait else msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]


def _open_lock(folder: str) -> int:
    """A descriptor to lock that stands for `folder`: the folder itself, or on Windows
    (where folders cannot be opened) the file `folder`.lock beside it."""
    if is_posix():
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW)
    return os.open(folder + LOCK_SUFFIX, os.O_RDWR | os.O_CREAT | BINARY | NOFOLLOW, 0o600)


def release(folder: str, fd: int) -> None:
    """Let go of the lock `fd` of `folder` (from `locked_temp`); its lock file too."""
    os.close(fd)
    if not is_posix():
        # Not contextlib.suppress: the warm start does not import contextlib.
        try:  # noqa: SIM105
            os.remove(folder + LOCK_SUFFIX)
        except OSError:
            pass  # another start locked it meanwhile: that start removes it


def _same(fd: int, folder: str) -> bool:
    """Whether the lock `fd` still stands for `folder` (not swept and made again)."""
    try:
        if is_posix():
            return os.path.samestat(os.fstat(fd), os.lstat(folder))
        return os.path.isdir(folder)
    except OSError:
        return False


def locked_temp(parent: str, prefix: str) -> tuple[str, int]:
    """A new folder with an unpredictable name in `parent`, and the descriptor holding
    its lock: while the lock is held, no other start sweeps it."""
    import tempfile

    for _ in range(20):
        temp = tempfile.mkdtemp(prefix=prefix, dir=parent)
        try:
            fd = _open_lock(temp)
        except FileNotFoundError:
            continue  # another start swept it before it could be locked: make another
        _lock(fd, wait=True)  # waits only while a sweeper holds it
        if _same(fd, temp):
            return temp, fd
        release(temp, fd)  # swept between its making and its locking: make another
    raise OSError(f"temporary folders in {parent} keep disappearing")


def sweep(parent: str, prefix: str) -> None:
    """Remove this user's temporary folders in `parent` that no live start holds locked."""
    try:
        stale = [
            name
            for name in os.listdir(parent)
            if name.startswith(prefix) and not name.endswith(LOCK_SUFFIX)
        ]
    except OSError:
        return
    if not stale:
        return
    import shutil

    uid = user_id()
    for name in stale:
        path = os.path.join(parent, name)
        try:
            fd = _open_lock(path)
        except OSError:
            continue
        locked = False
        try:
            st = os.fstat(fd)
            if uid is not None and st.st_uid != uid:
                continue
            try:
                _lock(fd, wait=False)
            except OSError:
                continue  # a live start is filling it
            locked = True
            if _same(fd, path):
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass
        finally:
            if locked and not is_posix():
                release(path, fd)  # and the lock file, the folder's or the one made here
            else:
                os.close(fd)  # a live start's lock file stays: it is its lock


def fsync(path: str) -> None:
    if not is_posix():
        return  # a folder cannot be opened on Windows; NTFS journals the rename
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
