"""The files a source folder is made of, and the hash of them that keys its actions.

A source is read the way a build backend will read it, so what could hurt the
build is refused here, before anything runs: a symlink that leads out of the
repository (the backend would copy what it points at into the wheel), a link
loop, and named pipes, sockets and device files (reading one blocks or never
ends). The error names the path.

A file a release copies from the checkout as it is (the license in the release
archives) is read by `shipyard.files.shipped`, under the same rules.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

from shipyard import git
from shipyard.errors import UsageError
from shipyard.files.statcache import StatMemo

__all__ = [
    "NEVER_INPUTS",
    "SPECIAL_FILES",
    "GitIgnored",
    "build_output",
    "never_input",
    "source_files",
    "tree_hash",
]

# Never inputs, at any depth: VCS data, environments and caches that change on every run.
NEVER_INPUTS = frozenset(
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
        ".shipyard",
    }
)
# Never inputs at the top of a source only: where a PEP 517 backend builds in place
# (setuptools' build/) and where wheels land (dist/, the checkout's own output when
# the source is the repository root). A folder of these names deeper down is code.
_OUTPUT_DIRS = frozenset({"build", "dist"})
# What a file that is neither a folder nor a regular file is, for a message.
SPECIAL_FILES = {
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}
# Folders reached through symlinks, nested: deeper is a loop in all but name.
_MAX_LINK_DEPTH = 8


def never_input(path: str) -> bool:
    """Whether the repository-relative `path` (with '/') lies in a folder that is never
    an input at any depth: VCS data, environments, caches."""
    return not NEVER_INPUTS.isdisjoint(path.split("/"))


def build_output(path: str, folder: str) -> bool:
    """Whether `path` is a build's own output at the top of the source `folder` (its
    dist/, build/; both repository-relative, '.' for the root), which is not an input."""
    inner = path if folder == "." else path[len(folder) + 1 :]
    return inner.split("/", 1)[0] in _OUTPUT_DIRS and "/" in inner


def _ask_git(source: Path) -> subprocess.Popen[bytes] | None:
    """Start asking git for the untracked paths it ignores under `source`."""
    return git.start(
        source, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory",
        "--", ".",
    )  # fmt: skip


def _answer(process: subprocess.Popen[bytes] | None) -> frozenset[str] | None:
    """What `_ask_git`'s git said (folders end in '/'), or None without git."""
    if process is None:
        return None
    out, _ = process.communicate()
    if process.returncode != 0:
        return None
    return frozenset(n for n in out.decode(errors="surrogateescape").split("\0") if n)


def _git_ignored(source: Path) -> frozenset[str] | None:
    """Untracked paths git ignores under `source` (folders end in '/'), or None without git."""
    return _answer(_ask_git(source))


class GitIgnored:
    """Which untracked files git ignores, asked once for a work tree and shared by its sources.

    One `git ls-files` at the repository root instead of one per source: on a
    no-op build each process started costs more than hashing a source. A source
    in a nested work tree (a submodule, a vendored clone) or under a folder git
    ignores whole is asked about on its own, so the answer is always the one
    `git -C SOURCE ls-files` would give. Safe to share between threads.
    """

    def __init__(self, root: Path) -> None:
        self._root = root.resolve()
        self._lock = threading.Lock()
        self._listed: tuple[frozenset[str] | None] | None = None
        self._asked: subprocess.Popen[bytes] | None = None

    def prefetch(self) -> GitIgnored:
        """Start asking git now, so its answer is ready when the first source is hashed
        (a no-op build waits on git's start-up more than on anything else)."""
        with self._lock:
            if self._listed is None and self._asked is None:
                self._asked = _ask_git(self._root)
        return self

    def under(self, source: Path) -> frozenset[str] | None:
        """git's ignored untracked names under `source` (relative to it), None without git."""
        source = source.resolve()
        if not source.is_relative_to(self._root) or self._nested(source):
            return _git_ignored(source)
        with self._lock:
            if self._listed is None:
                asked, self._asked = self._asked or _ask_git(self._root), None
                self._listed = (_answer(asked),)
        listed = self._listed[0]
        if listed is None or source == self._root:
            return listed
        prefix = source.relative_to(self._root).as_posix() + "/"
        if any(name.endswith("/") and prefix.startswith(name) for name in listed):
            return _git_ignored(source)  # the source itself is ignored: let git say how
        return frozenset(name[len(prefix) :] for name in listed if name.startswith(prefix))

    def _nested(self, source: Path) -> bool:
        folder = source
        while folder != self._root:
            if os.path.lexists(folder / ".git"):
                return True
            folder = folder.parent
        return False


def _refuse(path: str | Path, problem: str) -> UsageError:
    return UsageError(f"{path}: {problem}; sources hold only files, folders and symlinks inside")


def _follow(path: str, root: Path) -> str | None:
    """Where the symlink `path` leads, checked to stay in `root`; None when it dangles inside."""
    link = os.readlink(path)
    try:
        real = Path(path).resolve(strict=True)
    except FileNotFoundError:
        real = Path(path).resolve()
        if not real.is_relative_to(root):
            raise _refuse(path, f"a symlink to '{link}' leaves the repository ({root})") from None
        return None
    except (OSError, RuntimeError):
        raise _refuse(path, f"a symlink loop ('{link}')") from None
    if not real.is_relative_to(root):
        raise _refuse(path, f"a symlink to '{link}' leaves the repository ({root})")
    # .git/config may hold a CI token: what is never an input is never reached by a link.
    hidden = next((n for n in real.relative_to(root).parts if n in NEVER_INPUTS), None)
    if hidden is not None:
        raise _refuse(path, f"a symlink to '{link}' leads into {hidden}/, which is never a source")
    return str(real)


def _walk(
    folder: str,
    rel: str,
    root: Path,
    skip: frozenset[str],
    git: bool,
    through: tuple[str, ...],
    hops: int = 0,
) -> Iterator[str]:
    """Names (relative to the source) of the files below `folder`, checked on the way.

    `through` holds the real paths of the folders above, to catch link loops;
    `hops` counts the folder symlinks followed to get here. Plain strings and
    the directory entries' own types keep a no-op build's walk to one listing
    per folder (pathlib objects and a stat per entry cost more than the hashing).
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
        linked = item.is_symlink()
        if linked:
            real = _follow(item.path, root)
            if real is None:
                continue  # dangling inside the repository: nothing to read, nothing leaks
            mode = os.stat(real).st_mode
            is_dir, is_file = stat.S_ISDIR(mode), stat.S_ISREG(mode)
        else:
            real = f"{through[-1]}/{item.name}"
            is_dir = item.is_dir(follow_symlinks=False)
            is_file = item.is_file(follow_symlinks=False)
            mode = 0 if is_dir or is_file else item.stat(follow_symlinks=False).st_mode
        if not (is_dir or is_file):
            problem = SPECIAL_FILES.get(stat.S_IFMT(mode), "not a regular file")
            raise _refuse(item.path, f"is {problem}, which a build would block on")
        if is_dir:
            ignored = item.name in NEVER_INPUTS or f"{name}/" in skip
            ignored = ignored or (not rel and item.name in _OUTPUT_DIRS)
            if ignored or (not git and item.name.endswith(".egg-info")):
                continue
            if real in through or hops + linked > _MAX_LINK_DEPTH:
                raise _refuse(item.path, "a symlink loop (it leads back into a folder above it)")
            below = (*through, real)
            yield from _walk(item.path, f"{name}/", root, skip, git, below, hops + linked)
        elif git or not item.name.endswith(".pyc"):
            yield name


def _source_names(
    source: Path, top: Path, exclude: tuple[Path, ...], git: GitIgnored | None
) -> list[str]:
    """The sorted names of `source`'s files, relative to it (see `source_files`);
    both paths resolved, `source` inside `top`."""
    ignored = _git_ignored(source) if git is None else git.under(source)
    skip = set(ignored or ())
    nested = [path.resolve() for path in exclude]
    skip.update(
        path.relative_to(source).as_posix() + ("" if path.is_file() else "/")
        for path in nested
        if path.is_relative_to(source) and path != source
    )
    where = str(source)
    return sorted(_walk(where, "", top, frozenset(skip), ignored is not None, (where,)))


def _resolved_inside(source: Path, root: Path | None) -> tuple[Path, Path]:
    """`source` and `root` (default: `source`) resolved; the source must be inside."""
    resolved = source.resolve()
    top = resolved if root is None else root.resolve()
    if not resolved.is_relative_to(top):
        raise UsageError(f"source {source} leaves the repository ({top}); use a folder inside it")
    return resolved, top


def source_files(
    source: Path,
    *,
    root: Path | None = None,
    exclude: tuple[Path, ...] = (),
    git: GitIgnored | None = None,
) -> list[Path]:
    """The files of `source`, sorted: what git tracks or would track, else a filtered walk.

    Symlinks are followed while they stay inside `root` (default: `source`
    itself); one that leaves it, a link loop or a special file raises UsageError.
    Folders in `exclude` are left out, unread. `git` shares one question to
    git between the sources of a build.
    """
    resolved, top = _resolved_inside(source, root)
    return [resolved / name for name in _source_names(resolved, top, exclude, git)]


def tree_hash(
    source: Path,
    *extra: str,
    exclude: tuple[Path, ...] = (),
    root: Path | None = None,
    git: GitIgnored | None = None,
    memo: StatMemo | None = None,
) -> str:
    """sha256 over the relative names, modes and contents of `source`'s files plus `extra`.

    Files under any folder in `exclude` are left out; symlinks may lead anywhere
    inside `root` (default: `source`), see `source_files`. With `memo`, a file
    whose stat facts are unchanged since it was hashed is not read again.
    """
    digest = hashlib.sha256()
    for part in extra:
        digest.update(part.encode() + b"\0")
    resolved, top = _resolved_inside(source, root)
    where = str(resolved)
    for name in _source_names(resolved, top, exclude, git):
        path = f"{where}/{name}"
        digest.update(name.encode(errors="surrogateescape") + b"\0")
        digest.update(b"x" if os.access(path, os.X_OK) else b"-")
        digest.update(_file_hash(path) if memo is None else _memo_hash(path, memo))
    return digest.hexdigest()


def _memo_hash(path: str, memo: StatMemo) -> bytes:
    st = os.stat(path)  # before reading: a file changed meanwhile is recorded stale, never wrong
    known = memo.lookup(path, st) if stat.S_ISREG(st.st_mode) else None
    if known is not None:
        return bytes.fromhex(known)
    found = _file_hash(path)
    memo.record(path, st, found.hex())
    return found


def _file_hash(path: str) -> bytes:
    file = hashlib.sha256()
    # O_NONBLOCK: should the file have become a pipe since it was listed, fail, don't wait.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise _refuse(path, "is no longer a regular file")
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            file.update(chunk)
    return file.digest()
