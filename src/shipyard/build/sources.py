"""The files a source folder is made of, and the hash of them that keys its actions.

A source is read the way a build backend will read it, so what could hurt the
build is refused here, before anything runs: a symlink that leads out of the
repository (the backend would copy what it points at into the wheel), a link
loop, and named pipes, sockets and device files (reading one blocks or never
ends). The error names the path.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

from shipyard.errors import UsageError

__all__ = ["source_files", "tree_hash"]

# Never inputs: VCS data, caches and build droppings that change on every run.
_IGNORED_DIRS = frozenset(
    {
        ".git",
        "__pycache__",
        ".venv",
        "venv",
        ".nox",
        ".tox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        "build",
        "dist",
        ".shipyard",
    }
)
_SPECIAL = {
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}
# Folders reached through symlinks, nested: deeper is a loop in all but name.
_MAX_LINK_DEPTH = 8


def _git_ignored(source: Path) -> frozenset[str] | None:
    """Untracked paths git ignores under `source` (folders end in '/'), or None without git."""
    try:
        done = subprocess.run(
            [
                *("git", "-C", str(source), "ls-files", "-z", "--others", "--ignored"),
                *("--exclude-standard", "--directory", "--", "."),
            ],
            capture_output=True,
            check=False,
        )
    except OSError:
        return None
    if done.returncode != 0:
        return None
    return frozenset(n for n in done.stdout.decode(errors="surrogateescape").split("\0") if n)


def _refuse(path: Path, problem: str) -> UsageError:
    return UsageError(f"{path}: {problem}; sources hold only files, folders and symlinks inside")


def _follow(path: Path, root: Path) -> Path | None:
    """Where the symlink `path` leads, checked to stay in `root`; None when it dangles inside."""
    link = os.readlink(path)
    try:
        real = path.resolve(strict=True)
    except FileNotFoundError:
        real = path.resolve()
        if not real.is_relative_to(root):
            raise _refuse(path, f"a symlink to '{link}' leaves the repository ({root})") from None
        return None
    except (OSError, RuntimeError):
        raise _refuse(path, f"a symlink loop ('{link}')") from None
    if not real.is_relative_to(root):
        raise _refuse(path, f"a symlink to '{link}' leaves the repository ({root})")
    return real


def _walk(
    folder: Path,
    rel: str,
    root: Path,
    skip: frozenset[str],
    git: bool,
    through: tuple[Path, ...],
    hops: int = 0,
) -> Iterator[str]:
    """Names (relative to the source) of the files below `folder`, checked on the way.

    `through` holds the real paths of the folders above, to catch link loops;
    `hops` counts the folder symlinks followed to get here.
    """
    try:
        with os.scandir(folder) as listing:
            items = sorted(listing, key=lambda item: item.name)
    except OSError as exc:
        raise UsageError(f"{folder}: cannot list the folder ({exc.strerror})") from None
    for item in items:
        name = rel + item.name
        if name in skip:
            continue
        path = Path(item.path)
        info = item.stat(follow_symlinks=False)
        real: Path | None = through[-1] / item.name
        linked = stat.S_ISLNK(info.st_mode)
        if linked:
            real = _follow(path, root)
            if real is None:
                continue  # dangling inside the repository: nothing to read, nothing leaks
            info = real.stat()
        kind = stat.S_IFMT(info.st_mode)
        if kind in _SPECIAL:
            raise _refuse(path, f"is {_SPECIAL[kind]}, which a build would block on")
        if stat.S_ISDIR(info.st_mode):
            ignored = item.name in _IGNORED_DIRS or f"{name}/" in skip
            if ignored or (not git and item.name.endswith(".egg-info")):
                continue
            if real in through or hops + linked > _MAX_LINK_DEPTH:
                raise _refuse(path, "a symlink loop (it leads back into a folder above it)")
            assert real is not None
            yield from _walk(path, f"{name}/", root, skip, git, (*through, real), hops + linked)
        elif stat.S_ISREG(info.st_mode) and (git or not item.name.endswith(".pyc")):
            yield name


def source_files(
    source: Path, *, root: Path | None = None, exclude: tuple[Path, ...] = ()
) -> list[Path]:
    """The files of `source`, sorted: what git tracks or would track, else a filtered walk.

    Symlinks are followed while they stay inside `root` (default: `source`
    itself); one that leaves it, a link loop or a special file raises UsageError.
    Folders in `exclude` are left out, unread.
    """
    given, source = source, source.resolve()
    top = source if root is None else root.resolve()
    if not source.is_relative_to(top):
        raise UsageError(f"source {given} leaves the repository ({top}); use a folder inside it")
    ignored = _git_ignored(source)
    skip = set(ignored or ())
    skip.update(
        f"{folder.resolve().relative_to(source).as_posix()}/"
        for folder in exclude
        if folder.resolve().is_relative_to(source) and folder.resolve() != source
    )
    names = _walk(source, "", top, frozenset(skip), ignored is not None, (source,))
    return sorted(source / name for name in names)


def tree_hash(
    source: Path, *extra: str, exclude: tuple[Path, ...] = (), root: Path | None = None
) -> str:
    """sha256 over the relative names, modes and contents of `source`'s files plus `extra`.

    Files under any folder in `exclude` are left out; symlinks may lead anywhere
    inside `root` (default: `source`), see `source_files`.
    """
    digest = hashlib.sha256()
    for part in extra:
        digest.update(part.encode() + b"\0")
    resolved = source.resolve()
    for path in source_files(source, root=root, exclude=exclude):
        digest.update(path.relative_to(resolved).as_posix().encode() + b"\0")
        digest.update(b"x" if os.access(path, os.X_OK) else b"-")
        digest.update(_file_hash(path))
    return digest.hexdigest()


def _file_hash(path: Path) -> bytes:
    file = hashlib.sha256()
    # O_NONBLOCK: should the file have become a pipe since it was listed, fail, don't wait.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise _refuse(path, "is no longer a regular file")
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            file.update(chunk)
    return file.digest()
