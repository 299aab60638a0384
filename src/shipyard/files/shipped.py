"""A file a release copies from the checkout as it is (the license in the release
archives), read under the rules sources follow (`shipyard.files.sources`)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from shipyard.errors import UsageError
from shipyard.files.sources import NEVER_INPUTS, SPECIAL_FILES

__all__ = ["SHIPPED_FILE_MAX", "read_shipped_file"]

SHIPPED_FILE_MAX = 16 << 20
"""The largest file a release copies as it is (`read_shipped_file`): a license is
kilobytes, and what is read is held in memory whole."""


def _unshippable(path: str | Path, problem: str) -> UsageError:
    return UsageError(
        f"{path}: {problem}; a release ships this file as it is, so it must be a regular "
        "file of the repository or a symlink to one inside it: replace it with a copy of "
        "the text it should hold"
    )


def _shipped_target(path: Path, root: Path) -> tuple[str, ...]:
    """Where `path` leads, as names below the resolved `root`, checked as sources are."""
    where = Path(os.path.abspath(path))
    if not where.is_relative_to(os.path.abspath(root)):
        raise _unshippable(path, f"is not in the repository ({root})")
    linked = os.path.islink(where)
    link = f"a symlink to '{os.readlink(where)}'" if linked else "a path through a symlink"
    try:
        real = where.resolve(strict=True)
    except FileNotFoundError:
        if linked:
            raise _unshippable(path, f"{link}, which does not exist") from None
        raise _unshippable(path, "no such file") from None
    except (OSError, RuntimeError):
        raise _unshippable(path, f"{link} that loops") from None
    if not real.is_relative_to(root):
        raise _unshippable(path, f"{link} leaves the repository ({root})")
    names = real.relative_to(root).parts
    hidden = next((name for name in names[:-1] if name in NEVER_INPUTS), None)
    if hidden is not None:
        raise _unshippable(path, f"{link} leads into {hidden}/, which is never shipped")
    return names


def _kind(mode: int) -> str | None:
    """What a file of `mode` is when it is not a regular file, else None."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    return SPECIAL_FILES.get(stat.S_IFMT(mode), "not a regular file")


def read_shipped_file(path: Path, root: Path) -> bytes:
    """The bytes of `path`, a file of the repository at `root` that a release copies as
    it is (the license in the release archives).

    The rules of sources hold: a symlink is followed only while it stays inside
    `root` (and out of .git and the other folders that are never inputs), and what
    it names must be a regular file, not a folder, pipe, socket or device. Anything
    else raises UsageError (exit 2) naming `path` and the fix. The file is opened
    one folder at a time from `root`, none of them followed if it is a symlink, so
    a link swapped in after the check makes the read fail, not escape. A file larger
    than SHIPPED_FILE_MAX is a UsageError naming its size, and is not read.
    """
    top = root.resolve()
    names = _shipped_target(path, top)
    if not names:
        raise _unshippable(path, "is a folder")
    problem = _kind(os.stat(top.joinpath(*names)).st_mode)
    if problem is not None:
        raise _unshippable(path, f"is {problem}")
    below = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    folder = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in names[:-1]:
            inner = os.open(name, below | os.O_DIRECTORY, dir_fd=folder)
            os.close(folder)
            folder = inner
        # O_NONBLOCK: should a pipe have taken the file's place, fail rather than wait.
        fd = os.open(names[-1], below | os.O_NONBLOCK, dir_fd=folder)
    except OSError as exc:
        # A symlink or a pipe where the check found a folder or a file: swapped since.
        swapped = exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR, errno.ENXIO)
        problem = "changed while it was read" if swapped else "cannot be read"
        raise _unshippable(path, f"{problem} ({exc.strerror})") from None
    finally:
        os.close(folder)
    with os.fdopen(fd, "rb") as handle:
        about = os.fstat(handle.fileno())
        problem = _kind(about.st_mode)
        if problem is not None:
            raise _unshippable(path, f"changed while it was read: it is now {problem}")
        if about.st_size > SHIPPED_FILE_MAX:
            raise _too_large(path, f"{about.st_size} bytes")
        data = handle.read(SHIPPED_FILE_MAX + 1)  # it may be growing meanwhile
        if len(data) > SHIPPED_FILE_MAX:
            raise _too_large(path, f"more than {SHIPPED_FILE_MAX} bytes")
        return data


def _too_large(path: Path, size: str) -> UsageError:
    return UsageError(
        f"{path}: is {size}, more than the {SHIPPED_FILE_MAX} bytes "
        f"({SHIPPED_FILE_MAX >> 20} MiB) a file a release ships as it is may be; a license "
        "is kilobytes: point at the text of the license"
    )
