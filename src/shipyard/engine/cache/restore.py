"""Restoring outputs from a cache entry that is treated as untrusted input.

A cache entry (a shared cache folder, or a registry repository that anyone with
push rights fills) only proposes files, checked first (`shipyard.engine.cache.checks`).
A restore writes only regular files, only under the paths the action declares, with
mode 0644 or 0755, only bytes whose sha256 and size were checked while copying them
(or, for a hard link to a local cache blob that is the user's own file with the
output's mode, while hashing the link), and never through a symbolic link;
temporaries (fixed-length random names) live in the target folder itself.
Anything else, including an entry the file system cannot hold (a name too long,
a path that is both a file and a folder) or a write that fails part-way, raises
`RefusedEntry` before anything is kept: the caller logs it and treats the entry
as a miss, so a hostile entry can cost a rebuild but never fail the build.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from shipyard._fs import TEMP_PREFIX
from shipyard.artifacts import Artifact
from shipyard.engine.cache.checks import RefusedEntry

__all__ = ["PlacedFile", "place_files"]

_CHUNK = 1 << 20
_NAME_MAX = 255  # bytes in one path part: Linux's NAME_MAX, whatever a file system allows
_PATH_MAX = 4096  # bytes in a whole path: Linux's PATH_MAX

# Whether the regular file at a path, of the right size, holds (sha256, size).
Holds = Callable[[Path, str, int], bool]


@dataclass(frozen=True)
class PlacedFile:
    """One output a restore puts in place: from `source`, to `parts` under the repository."""

    source: Path
    parts: tuple[str, ...]
    sha256: str
    size: int
    mode: int
    about: Artifact  # the artifact's kind, binary, platform and metadata (path and bytes unset)
    # When set, the file is these blobs one after the other, each (blob, size), not `source`
    # alone (`shipyard.engine.cache.pieces`); the whole is checked against sha256 and size.
    pieces: tuple[tuple[Path, int], ...] = ()
    # Whether a whole blob may be hard-linked into place instead of copied: when it is
    # this user's own regular file with the output's mode (checked by hashing the link).
    link: bool = False

    def blobs(self) -> tuple[tuple[Path, int], ...]:
        """The blobs the file is made of, in order, each with its size."""
        return self.pieces or ((self.source, self.size),)


@dataclass
class _Pending:
    folder: int  # the target folder, opened without following symbolic links
    temp: str  # the checked copy, until it is renamed into place
    name: str
    backup: str = ""  # what was at `name` before, set aside until all are in place


def _temp_name() -> str:
    """A new temporary's name: fixed length, whatever the output's (never too long)."""
    return f"{TEMP_PREFIX}{os.urandom(8).hex()}"  # what secrets.token_hex does


def place_files(
    repo: Path, files: Sequence[PlacedFile], holds: Holds | None = None
) -> tuple[tuple[Artifact, ...], list[tuple[Path, str]]]:
    """Put `files` in place under `repo`: all of them, or (RefusedEntry) none.

    Before anything is written, the paths are checked to fit together and on the
    file system (no path both a file and another's folder, no part longer than
    NAME_MAX). Every folder on the way is opened without following symbolic
    links (one planted in dist/ is refused, not written through), each file is
    copied into a temporary in its own target folder while its sha256 and size
    are checked, and only when all are whole are they renamed into place. A file
    already in place (a regular file with the bytes: `holds` says, else its
    hash) is left alone. Any failure, an OSError included, undoes what was done
    (temporaries, folders made, files replaced) and raises RefusedEntry. Returns
    the artifacts and the (target, sha256) pairs written or checked.
    """
    if not files:
        raise RefusedEntry("it names no outputs")  # every action makes at least one
    _check_layout(repo, files)
    try:
        with _Folders(repo) as folders:
            seen = _place(repo, folders, files, holds)
    except OSError as exc:
        raise RefusedEntry(
            f"its outputs could not be put in place, nothing was kept: {exc}"
        ) from exc
    restored = tuple(
        dataclasses.replace(f.about, path=repo.joinpath(*f.parts), sha256=f.sha256, size=f.size)
        for f in files
    )
    return restored, seen


def _check_layout(repo: Path, files: Sequence[PlacedFile]) -> None:
    """RefusedEntry unless the outputs' paths can all be files on this file system."""
    paths = {f.parts for f in files}
    if len(paths) != len(files):
        raise RefusedEntry("two outputs have the same path")
    name_max, path_max = _limits(repo)
    base = len(os.fsencode(str(repo))) + 1
    for file in files:
        shown = "/".join(file.parts)
        shown = shown if len(shown) <= 120 else shown[:117] + "..."
        longest = max(len(os.fsencode(part)) for part in file.parts)
        if longest > name_max:
            raise RefusedEntry(
                f"output path {shown!r} has a part of {longest} bytes (at most {name_max})"
            )
        if base + len(os.fsencode("/".join(file.parts))) >= path_max:
            raise RefusedEntry(f"output path {shown!r} is longer than {path_max} bytes")
        for depth in range(1, len(file.parts)):
            if file.parts[:depth] in paths:
                folder = "/".join(file.parts[:depth])
                raise RefusedEntry(f"output {folder} is also the folder of output {shown}")


def _limits(repo: Path) -> tuple[int, int]:
    """The longest name and path, in bytes, a restore writes under `repo`."""
    found: list[int] = []
    for name, default in (("PC_NAME_MAX", _NAME_MAX), ("PC_PATH_MAX", _PATH_MAX)):
        try:
            value = os.pathconf(repo, name)
        except (OSError, ValueError):
            value = default
        found.append(min(value, default) if value > 0 else default)
    return found[0], found[1]


def _place(
    repo: Path, folders: _Folders, files: Sequence[PlacedFile], holds: Holds | None
) -> list[tuple[Path, str]]:
    """Copy, check, then rename every file into place; on any failure undo it all."""
    pending: list[_Pending] = []
    seen: list[tuple[Path, str]] = []
    done: list[_Pending] = []
    try:
        for file in files:
            folder = folders.open(file.parts[:-1])
            target = repo.joinpath(*file.parts)
            seen.append((target, file.sha256))
            if not _in_place(folder, file, target, holds):
                item = _Pending(folder, "", file.parts[-1])
                pending.append(item)
                item.temp = _copy_checked(folder, file)
        for item in pending:
            backup = _temp_name()
            try:
                os.rename(item.name, backup, src_dir_fd=item.folder, dst_dir_fd=item.folder)
                item.backup = backup
            except FileNotFoundError:
                pass
            done.append(item)
            os.replace(item.temp, item.name, src_dir_fd=item.folder, dst_dir_fd=item.folder)
            item.temp = ""
    except BaseException:
        for item in reversed(done):  # put back what was there
            with contextlib.suppress(OSError):
                if item.backup:
                    os.replace(
                        item.backup, item.name, src_dir_fd=item.folder, dst_dir_fd=item.folder
                    )
                    item.backup = ""
                elif not item.temp:
                    os.unlink(item.name, dir_fd=item.folder)
        raise
    finally:
        for item in pending:
            for name in (item.temp, item.backup):
                if name:
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=item.folder)
    return seen


class _Folders:
    """The folders of a restore, opened from the repository down without following links.

    If the restore fails, the folders it made (then empty) are removed again.
    """

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self._open: dict[tuple[str, ...], int] = {}
        self._made: list[tuple[str, ...]] = []

    def __enter__(self) -> _Folders:
        self._open[()] = os.open(self.repo, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        return self

    def __exit__(self, failed: type[BaseException] | None, *_: object) -> None:
        if failed is not None:
            for key in reversed(self._made):  # the deepest first
                with contextlib.suppress(OSError):
                    os.rmdir(key[-1], dir_fd=self._open[key[:-1]])
        for fd in self._open.values():
            os.close(fd)
        self._open.clear()

    def open(self, parts: tuple[str, ...]) -> int:
        """The folder `parts` under the repository, made if missing; RefusedEntry if any
        part is a symbolic link or not a folder."""
        fd = self._open[()]
        for depth in range(1, len(parts) + 1):
            key = parts[:depth]
            if key not in self._open:
                try:
                    os.mkdir(key[-1], 0o755, dir_fd=fd)
                    self._made.append(key)
                except FileExistsError:
                    pass
                flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
                try:
                    self._open[key] = os.open(key[-1], flags, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    where = "/".join(key)
                    raise RefusedEntry(f"{where} is a symbolic link or a file") from None
            fd = self._open[key]
        return fd


def _in_place(folder: int, file: PlacedFile, target: Path, holds: Holds | None) -> bool:
    """Whether the target is a regular file (not a link) that already holds the bytes."""
    try:
        facts = os.stat(file.parts[-1], dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(facts.st_mode):
        raise RefusedEntry(f"{'/'.join(file.parts)} is a folder")
    if not stat.S_ISREG(facts.st_mode) or facts.st_size != file.size:
        return False
    if holds is not None:
        return holds(target, file.sha256, file.size)
    fd = os.open(file.parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    with os.fdopen(fd, "rb") as handle:
        return _digest(handle, file.size + 1)[0] == file.sha256


def _digest(handle: IO[bytes], limit: int) -> tuple[str, int]:
    """The sha256 and length of at most `limit` bytes of `handle`."""
    hasher = hashlib.sha256()
    total = _feed(handle, limit, hasher, None)
    return hasher.hexdigest(), total


def _feed(handle: IO[bytes], limit: int, hasher: hashlib._Hash, out: IO[bytes] | None) -> int:
    """Hash (and copy to `out`) at most `limit` bytes of `handle`; how many there were."""
    total = 0
    while total < limit:
        chunk = handle.read(min(_CHUNK, limit - total))
        if not chunk:
            break
        hasher.update(chunk)
        total += len(chunk)
        if out is not None:
            out.write(chunk)
    return total


def _open_blob(path: Path) -> IO[bytes]:
    """The blob at `path` for reading, never through a symbolic link (RefusedEntry)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise RefusedEntry(f"blob {path} is a symbolic link", path) from None
    return os.fdopen(fd, "rb")


def _linked(folder: int, file: PlacedFile) -> str | None:
    """A new temporary in `folder` hard-linked to the blob of `file`, its sha256 and size
    checked; None when it cannot be (another file system, a blob that is not this user's
    own regular file with the output's mode, pieces): copy it instead."""
    if not file.link or file.pieces:
        return None
    temp = _temp_name()
    try:
        os.link(file.source, temp, dst_dir_fd=folder, follow_symlinks=False)
    except OSError:
        return None  # EXDEV across file systems, EPERM for another user's blob
    try:
        try:
            fd = os.open(temp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
        except OSError:
            os.unlink(temp, dir_fd=folder)
            return None  # a link to a symbolic link: the copy refuses it
        with os.fdopen(fd, "rb") as reader:
            facts = os.fstat(reader.fileno())
            if (
                not stat.S_ISREG(facts.st_mode)
                or stat.S_IMODE(facts.st_mode) != file.mode
                or facts.st_uid != os.geteuid()  # nobody else may write it afterwards
            ):
                os.unlink(temp, dir_fd=folder)
                return None
            digest, size = _digest(reader, file.size + 1)
        if (digest, size) != (file.sha256, file.size):
            raise RefusedEntry(
                f"the blob for {'/'.join(file.parts)} has sha256 {digest} and {size} "
                f"bytes, not {file.sha256} and {file.size}",
                file.source,
            )
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=folder)
        raise
    return temp


def _copy_checked(folder: int, file: PlacedFile) -> str:
    """Link (`_linked`) or copy the blobs of `file` into a new temporary in `folder`,
    checking the whole file's sha256 and size as it goes; return the temporary's name
    (durable, with the file's mode)."""
    linked = _linked(folder, file)
    if linked is not None:
        return linked
    temp = _temp_name()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        readers = [(_open_blob(path), size) for path, size in file.blobs()]
        try:
            out = os.open(temp, flags, 0o600, dir_fd=folder)
            with os.fdopen(out, "wb") as writer:
                hasher, total = hashlib.sha256(), 0
                for reader, size in readers:
                    total += _feed(reader, size + 1, hasher, writer)
                digest = hasher.hexdigest()
                if (digest, total) != (file.sha256, file.size):
                    raise RefusedEntry(
                        f"the blob for {'/'.join(file.parts)} has sha256 {digest} and {total} "
                        f"bytes, not {file.sha256} and {file.size}",
                        _bad_blob(file),
                    )
                writer.flush()
                os.fchmod(writer.fileno(), file.mode)
                os.fsync(writer.fileno())  # durable before the rename that publishes it
        finally:
            for reader, _ in readers:
                reader.close()
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=folder)
        raise
    return temp


def _bad_blob(file: PlacedFile) -> Path | None:
    """The blob of `file` that holds other bytes than its name says: the only one of a
    whole file, or the first piece whose sha256 or size is off (None: every piece is
    whole, so the entry itself lies about the file)."""
    if not file.pieces:
        return file.source
    for path, size in file.pieces:
        with contextlib.suppress(OSError), _open_blob(path) as reader:
            hasher = hashlib.sha256()
            if (_feed(reader, size + 1, hasher, None), hasher.hexdigest()) == (size, path.name):
                continue
        return path
    return None
