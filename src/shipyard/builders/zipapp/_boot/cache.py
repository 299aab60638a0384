"""The cache of unpacked builds: one folder per build, held while it runs, pruned.

Every running start holds a shared lock on its build folder's ``use`` file and touches
it; when a start makes a new build folder, the folders of older builds of the same
binary beyond the newest $SHIPYARD_ZIPAPP_KEEP (default 3) are removed, unless a
running start holds them. A build's site is unpacked once, in a locked temporary
folder renamed into place; when the cache cannot be trusted, into a private
temporary folder removed at exit. On Windows a build folder is held by keeping its
use file open, which makes Windows refuse the rename that removes the folder.
"""

from __future__ import annotations

import os
import stat

from .extract import extract
from .folders import fsync, locked_temp, makedirs, release, sweep
from .host import BINARY, NOFOLLOW, BootError, is_posix, user_id
from .layout import SITE
from .trust import ROOT_ENV, UntrustedCache, UnwritableCache, untrusted

# Not `typing.TYPE_CHECKING`: importing typing (or json, which imports re) costs more
# than the rest of the bootstrap on a Python that has not loaded them yet.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "KEEP",
    "KEEP_ENV",
    "PRIVATE_PREFIX",
    "REMOVE_PREFIX",
    "UNPACK_PREFIX",
    "USE",
    "builds_to_keep",
    "hold",
    "is_build_id",
    "prune",
    "unpack",
    "unpack_private",
]

# How many builds of one binary stay unpacked (the newest by last use).
KEEP_ENV = "SHIPYARD_ZIPAPP_KEEP"
KEEP = 3
# In each build folder: the binary's name; its mtime is the folder's last use, and every
# running start holds a shared lock on it, so no other start removes the folder meanwhile.
USE = "use"
# A build folder being removed is first renamed to this prefix in the root.
REMOVE_PREFIX = ".remove-"
# Temporary folders: in a build folder while unpacking, in the temp folder when the
# cache is not trusted. A live one is flock-ed by its process; an unlocked one is a
# killed start's leftover, swept by the next start.
UNPACK_PREFIX = ".unpack-"
PRIVATE_PREFIX = "shipyard-zipapp-"


def unpack(archive: str, target: str, root: str | None = None) -> str:
    """Unpack the archive's site into `target`, once.

    `target` is reused or made only when no one else could have written it (see
    `untrusted`; `root` defaults to the folder two levels up, the cache root), else
    UntrustedCache; UnwritableCache when it cannot be made or written. The copy is
    made in a locked temporary folder, flushed, and renamed into place, so `target` is
    complete whenever it exists; when two processes race, the loser of the rename uses
    the winner's copy. A killed start's temporary folder is swept by a later one.
    """
    root = root or os.path.dirname(os.path.dirname(target))
    parent = os.path.dirname(target)
    reason = untrusted(root, target)
    if reason:
        raise UntrustedCache(reason)
    if os.path.isdir(target):
        sweep(parent, UNPACK_PREFIX)
        return target
    import shutil

    temp = ""
    lock = -1
    try:
        makedirs(parent)
        reason = untrusted(root, parent)  # someone may have made it first
        if reason:
            raise UntrustedCache(reason)
        sweep(parent, UNPACK_PREFIX)
        temp, lock = locked_temp(parent, UNPACK_PREFIX)
        extract(archive, temp)
        try:
            os.rename(temp, target)
        except OSError:
            if not os.path.isdir(target):
                raise
        else:
            fsync(parent)
    except OSError as exc:
        raise UnwritableCache(parent, str(exc.strerror or exc)) from None
    finally:
        if temp and os.path.isdir(temp):
            shutil.rmtree(temp, ignore_errors=True)
        if lock >= 0:
            release(temp, lock)
    return target


def _remove(folder: str, lock: int) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    release(folder, lock)


def unpack_private(archive: str) -> str:
    """Unpack the archive's site into a new private temporary folder, removed at exit;
    the site's path.

    For when the cache cannot be trusted. The folder stays locked while this process
    lives, so a later start sweeps it only once it is abandoned.
    """
    import atexit
    import tempfile

    base = tempfile.gettempdir()
    try:
        sweep(base, PRIVATE_PREFIX)
        folder, lock = locked_temp(base, PRIVATE_PREFIX)
    except OSError as exc:
        raise BootError(
            f"cannot unpack the zipapp into {base} ({exc.strerror or exc}); "
            f"set TMPDIR or {ROOT_ENV} to a directory only you can write"
        ) from None
    atexit.register(_remove, folder, lock)
    target = os.path.join(folder, SITE)
    try:
        os.mkdir(target, 0o700)
        extract(archive, target)
    except OSError as exc:
        raise BootError(
            f"cannot unpack the zipapp into {folder} ({exc.strerror or exc}); "
            f"set TMPDIR or {ROOT_ENV} to a directory only you can write"
        ) from None
    return target


# The use files this process holds: open (and locked) until it exits.
_HELD: list[int] = []


def hold(root: str, home: str, binary: str) -> bool:
    """Make the build folder `home` if needed and hold it while this process lives.

    Holding is a shared lock on its use file, touched to record this use. True when this
    start made the use file (a new build folder). UntrustedCache when the folder or the
    file is someone else's, UnwritableCache when it cannot be made.

    Windows has no shared flock: there the use file is only kept open, which is enough,
    as Windows refuses to rename a folder that holds an open file (see `prune`).
    """
    posix = is_posix()
    uid = user_id()
    path = os.path.join(home, USE)
    try:
        for _ in range(5):
            makedirs(home)
            reason = untrusted(root, home)
            if reason:
                raise UntrustedCache(reason)
            made = True
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | NOFOLLOW | BINARY, 0o600)
            except FileExistsError:
                made = False
                fd = os.open(path, os.O_RDONLY | NOFOLLOW | BINARY)
            try:
                st = os.fstat(fd)
                if (uid is not None and st.st_uid != uid) or not stat.S_ISREG(st.st_mode):
                    raise UntrustedCache(f"{path} is not a file of yours")
                if made:
                    os.write(fd, binary.encode())
                if posix:
                    import fcntl

                    fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a pruner holds it
                if os.path.samestat(st, os.lstat(path)):
                    # Not contextlib.suppress: the warm start does not import contextlib.
                    try:  # noqa: SIM105
                        os.utime(fd if posix else path)  # Windows: no utime on a descriptor
                    except OSError:
                        pass  # a read-only cache still runs; its folders just look unused
                    _HELD.append(fd)
                    return made
            except FileNotFoundError:
                pass  # removed while this start waited for the lock: make it again
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
    except OSError as exc:
        raise UnwritableCache(os.path.dirname(home), str(exc.strerror or exc)) from None
    raise UnwritableCache(os.path.dirname(home), "its build folder keeps being removed")


def is_build_id(name: str) -> bool:
    return len(name) == 64 and all(c in "0123456789abcdef" for c in name)


def prune(root: str, binary: str, keep: int, current: str = "") -> list[str]:
    """Remove this user's build folders of `binary` under `root` beyond the `keep` most
    recently used (`current`, a build id, counts as one and is never removed); the
    removed build ids. A folder a running start holds is left alone: on POSIX systems
    it is locked; on Windows its use file is open, so its rename fails.
    """
    import shutil

    uid = user_id()
    posix = is_posix()
    try:
        names = os.listdir(root)
    except OSError:
        return []
    if any(name.startswith(REMOVE_PREFIX) for name in names):
        sweep(root, REMOVE_PREFIX)  # a removal a crash interrupted: finish it
    used: list[tuple[float, str]] = []
    for name in names:
        path = os.path.join(root, name)
        if name == current or not is_build_id(name):
            continue
        try:
            with open(os.path.join(path, USE), "rb", opener=_open_nofollow) as handle:
                st = os.fstat(handle.fileno())
                owner = handle.read(256).decode("utf-8", "replace")
        except OSError:
            continue  # being made, or not a build folder of this bootstrap
        if (uid is None or st.st_uid == uid) and owner == binary:
            used.append((st.st_mtime, name))
    removed = []
    for _, name in sorted(used, reverse=True)[max(keep - 1, 0) :]:
        home = os.path.join(root, name)
        trash = os.path.join(root, f"{REMOVE_PREFIX}{name[:16]}-{os.urandom(4).hex()}")
        if not posix:
            try:
                os.rename(home, trash)  # refused while a running start has its use file open
            except OSError:
                continue  # running, or already gone
            shutil.rmtree(trash, ignore_errors=True)
            removed.append(name)
            continue
        import fcntl

        try:
            fd = os.open(os.path.join(home, USE), os.O_RDONLY | NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(home, trash)
        except OSError:
            continue  # running, or already gone
        finally:
            os.close(fd)
        shutil.rmtree(trash, ignore_errors=True)
        removed.append(name)
    return removed


def builds_to_keep(environ: Mapping[str, str]) -> int:
    try:
        return max(int(environ.get(KEEP_ENV, KEEP)), 1)
    except ValueError:
        return KEEP


def _open_nofollow(path: str, flags: int) -> int:
    return os.open(path, flags | NOFOLLOW)
