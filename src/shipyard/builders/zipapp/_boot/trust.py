"""Where builds unpack, and whether a cache folder is safe to run code from.

The cache is code that runs, so it is used only when no one else could have written it:
the root and every folder under it owned by this user (or root) and not writable by
group or others, every folder above the root owned by this user or root and either not
writable by group or others or sticky (as /tmp is). The cache is under XDG_CACHE_HOME
(or ~/.cache) on Linux, ~/Library/Caches on macOS and %LOCALAPPDATA% on Windows, or
where $SHIPYARD_ZIPAPP_ROOT says. Windows has no POSIX owners or modes, so the trust
checks are skipped there (the default folder is the user's own by its ACL).
"""

from __future__ import annotations

import os
import stat

from .host import BootError, system, user_id

# Not `typing.TYPE_CHECKING`: importing typing (or json, which imports re) costs more
# than the rest of the bootstrap on a Python that has not loaded them yet.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["ROOT_ENV", "UntrustedCache", "UnwritableCache", "cache_root", "untrusted"]

ROOT_ENV = "SHIPYARD_ZIPAPP_ROOT"


class UntrustedCache(Exception):
    """A cache folder someone else could have written: its contents must not run."""


class UnwritableCache(BootError):
    """The cache folder cannot be made or written (`folder`, and the system's reason)."""

    def __init__(self, folder: str, reason: str) -> None:
        super().__init__(
            f"cannot unpack the zipapp into {folder} ({reason}); "
            f"set {ROOT_ENV} to a writable directory"
        )
        self.folder = folder
        self.reason = reason


def cache_root(environ: Mapping[str, str]) -> str:
    """Where builds unpack: $SHIPYARD_ZIPAPP_ROOT, else the user cache folder of this OS
    ($XDG_CACHE_HOME or ~/.cache on Linux, ~/Library/Caches on macOS, %LOCALAPPDATA%
    on Windows), in shipyard/zipapps."""
    if environ.get(ROOT_ENV):
        return environ[ROOT_ENV]
    home = os.path.expanduser("~")
    which = system()
    if which == "windows":
        base = environ.get("LOCALAPPDATA") or os.path.join(home, "AppData", "Local")
    elif which == "darwin":
        base = os.path.join(home, "Library", "Caches")
    else:
        base = environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return os.path.join(base, "shipyard", "zipapps")


def _judge(path: str, st: os.stat_result, uid: int, above: bool) -> str | None:
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return f"{path} is a symlink"
    if not stat.S_ISDIR(mode):
        return None  # not a trust question: making or using the folder fails, saying so
    if st.st_uid not in (uid, 0):
        return f"{path} is owned by uid {st.st_uid}, not by you (uid {uid}) or root"
    if mode & 0o022 and not (above and mode & stat.S_ISVTX):
        who = "group and others" if mode & 0o022 == 0o022 else "group" if mode & 0o020 else "others"
        return f"{path} is writable by {who} (mode {stat.S_IMODE(mode):o})"
    return None


def untrusted(root: str, *folders: str) -> str | None:
    """Why the cache folders `folders` under `root` are not safe to use, or None.

    Paths are absolute and symlink-free (the root is resolved first). Folders that do
    not exist yet are safe: the bootstrap makes them, private. A folder above the root
    may also be writable by others when it is sticky, as /tmp is.

    On Windows there is nothing to check: files have no POSIX owner (st_uid is 0) and
    their mode says only whether they are read-only, while who may write is in ACLs,
    which the default root, in %LOCALAPPDATA%, has private to the user.
    """
    uid = user_id()
    if uid is None:
        return None
    root = root.rstrip(os.sep) or os.sep
    seen: set[str] = set()
    for folder in folders:
        path = os.sep
        rest = [p for p in folder.split(os.sep) if p]
        for index in range(len(rest) + 1):
            if index:
                path = os.path.join(path, rest[index - 1])
            if path in seen:
                continue
            seen.add(path)
            try:
                st = os.lstat(path)
            except OSError:
                break  # missing or unreachable: nothing below can be read either
            above = len(path) < len(root) and root.startswith(path)
            reason = _judge(path, st, uid, above)
            if reason:
                return reason
            if not stat.S_ISDIR(st.st_mode):
                break
    return None
