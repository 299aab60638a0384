"""Restoring outputs from a cache entry that is treated as untrusted input.

A cache entry (a shared cache folder, or a registry repository that anyone with
push rights fills) only proposes files. A restore writes only regular files, only
under the paths the action declares (`declared_outputs`), with mode 0644 or 0755,
only bytes whose sha256 and size were checked while copying them, only
artifacts the action could have made, and never through a symbolic link;
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
import fnmatch
import hashlib
import os
import re
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from shipyard._fs import TEMP_PREFIX
from shipyard.artifacts import ANY, Artifact
from shipyard.dist import output_patterns
from shipyard.engine.context import BuildContext
from shipyard.engine.plan import Action

__all__ = [
    "Declared",
    "PlacedFile",
    "RefusedEntry",
    "checked_description",
    "checked_mode",
    "checked_path",
    "checked_sha256",
    "checked_size",
    "declared_outputs",
    "place_files",
    "stored_mode",
]

_SHA256 = re.compile(r"[0-9a-f]{64}")
_MODES = (0o644, 0o755)  # never setuid, setgid, sticky, or writable by others
_CHUNK = 1 << 20
_NAME_MAX = 255  # bytes in one path part: Linux's NAME_MAX, whatever a file system allows
_PATH_MAX = 4096  # bytes in a whole path: Linux's PATH_MAX

# Whether the regular file at a path, of the right size, holds (sha256, size).
Holds = Callable[[Path, str, int], bool]


class RefusedEntry(Exception):
    """A cache entry a restore will not use: a miss, logged with this reason.

    `blob` names a stored blob found to hold other bytes than its digest says.
    """

    def __init__(self, reason: str, blob: Path | None = None) -> None:
        super().__init__(reason)
        self.blob = blob


@dataclass(frozen=True)
class Declared:
    """The repository-relative paths an action may write, as glob patterns, and the
    action itself (whose artifacts alone a restore accepts; any, when None).

    A pattern is a tuple of path parts, each matched against one part (fnmatch,
    so a `*` never crosses a `/`); a last part `**` matches one or more parts.
    """

    patterns: tuple[tuple[str, ...], ...]
    action: Action | None = None

    @classmethod
    def dist(cls) -> Declared:
        """Anything under dist/: for callers that know no action."""
        return cls((("dist", "**"),))

    def allows(self, parts: Sequence[str]) -> bool:
        """Whether the path made of `parts` matches one of the patterns."""
        return any(_matches(pattern, parts) for pattern in self.patterns)

    def owns(self, artifact: Artifact) -> bool:
        """Whether `artifact` is one the action could have made (a cache entry may lie)."""
        action = self.action
        if action is None:
            return True
        kind = artifact.kind == action.kind or artifact.kind.startswith(action.kind + "-")
        if action.kind == "wheel":
            return kind and not artifact.binary
        if action.kind == "test":
            return kind and artifact.binary == action.project and artifact.platform == ANY
        platform = artifact.platform == ANY or artifact.platform in action.platforms
        return kind and platform and artifact.binary in action.binaries

    def __str__(self) -> str:
        return ", ".join("/".join(p) for p in self.patterns) or "nothing"


def _matches(pattern: tuple[str, ...], parts: Sequence[str]) -> bool:
    if pattern and pattern[-1] == "**":
        head = pattern[:-1]
        if len(parts) <= len(head):
            return False
    elif len(parts) != len(pattern):
        return False
    else:
        head = pattern
    return all(fnmatch.fnmatchcase(part, want) for part, want in zip(parts, head, strict=False))


def declared_outputs(action: Action, ctx: BuildContext) -> Declared:
    """Where `action` may write: the dist/ paths its kind's builder publishes to
    (`shipyard.dist.output_patterns`). A restore writes nothing else, whatever a
    cache entry names.
    """
    try:
        dist = ctx.dist.relative_to(ctx.root).parts
    except ValueError:
        return Declared(())  # outputs outside the checkout: none is restored
    binary = action.binaries[0] if action.binaries else None
    if action.kind == "test":
        binary = f"{action.project}/{action.stage}"
    return Declared(tuple((*dist, *p) for p in output_patterns(action.kind, binary)), action)


def checked_path(value: object, declared: Declared) -> tuple[str, ...]:
    """The parts of an entry's output path, if it is relative, normalised, has no
    hidden part (.git, .tmp-*) and is one `declared` allows; else RefusedEntry."""
    if not isinstance(value, str) or not value or "\0" in value:
        raise RefusedEntry(f"output path {value!r} is not a path")
    try:
        value.encode("utf-8")  # strict: a lone surrogate is no file name
    except UnicodeEncodeError:
        raise RefusedEntry(f"output path {value!r} is not UTF-8") from None
    if value.startswith("/"):
        raise RefusedEntry(f"output path {value!r} is absolute")
    parts = tuple(value.split("/"))
    if any(part in ("", ".", "..") for part in parts):
        raise RefusedEntry(f"output path {value!r} is not normalised (an empty, . or .. part)")
    if any(part.startswith(".") for part in parts):
        raise RefusedEntry(f"output path {value!r} has a hidden part")
    if not declared.allows(parts):
        raise RefusedEntry(f"output path {value!r} is not one of the action's ({declared})")
    return parts


def checked_sha256(value: object) -> str:
    """`value` if it is a sha256 in 64 lowercase hex digits; else RefusedEntry."""
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise RefusedEntry(f"sha256 {value!r} is not 64 lowercase hex digits")
    return value


def checked_size(value: object) -> int:
    """`value` if it is a byte count; else RefusedEntry."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise RefusedEntry(f"size {value!r} is not a byte count")
    return value


def checked_description(value: object, declared: Declared | None = None) -> Artifact:
    """The artifact `value` describes (kind, binary, platform, metadata; no path or
    bytes yet) if `declared`'s action could have made it; else RefusedEntry."""
    try:
        artifact = Artifact.described(value, Path(), "", 0)
    except ValueError as exc:
        raise RefusedEntry(f"the artifact description: {exc}") from None
    if declared is not None and not declared.owns(artifact):
        assert declared.action is not None
        raise RefusedEntry(
            f"it describes a {artifact.kind} of {artifact.binary or 'no binary'!r} for "
            f"{artifact.platform}, which {declared.action.id} does not make"
        )
    return artifact


def checked_mode(value: object) -> int:
    """`value` if it is 0o644 or 0o755 (what a store records); else RefusedEntry."""
    if not isinstance(value, int) or isinstance(value, bool) or value not in _MODES:
        shown = f"{value:o}" if isinstance(value, int) else repr(value)
        raise RefusedEntry(f"mode {shown} is neither 644 nor 755")
    return value


def stored_mode(path: Path) -> int:
    """The mode a cache records for an output: 0o755 if its owner may run it, else 0o644."""
    return 0o755 if path.stat().st_mode & stat.S_IXUSR else 0o644


@dataclass(frozen=True)
class PlacedFile:
    """One output a restore puts in place: from `source`, to `parts` under the repository."""

    source: Path
    parts: tuple[str, ...]
    sha256: str
    size: int
    mode: int
    about: Artifact  # the artifact's kind, binary, platform and metadata (path and bytes unset)


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


def _digest(handle: IO[bytes], limit: int, out: IO[bytes] | None = None) -> tuple[str, int]:
    """The sha256 and length of at most `limit` bytes of `handle`, copied to `out` too."""
    hasher, total = hashlib.sha256(), 0
    while total < limit:
        chunk = handle.read(min(_CHUNK, limit - total))
        if not chunk:
            break
        hasher.update(chunk)
        total += len(chunk)
        if out is not None:
            out.write(chunk)
    return hasher.hexdigest(), total


def _copy_checked(folder: int, file: PlacedFile) -> str:
    """Copy `file.source` into a new temporary in `folder`, checking its sha256 and size
    as it goes; return the temporary's name (durable, with the file's mode)."""
    try:
        source = os.open(file.source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise RefusedEntry(f"blob {file.source} is a symbolic link", file.source) from None
    temp = _temp_name()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        with os.fdopen(source, "rb") as reader:
            out = os.open(temp, flags, 0o600, dir_fd=folder)
            with os.fdopen(out, "wb") as writer:
                digest, size = _digest(reader, file.size + 1, writer)
                if (digest, size) != (file.sha256, file.size):
                    raise RefusedEntry(
                        f"the blob for {'/'.join(file.parts)} has sha256 {digest} and {size} "
                        f"bytes, not {file.sha256} and {file.size}",
                        file.source,
                    )
                writer.flush()
                os.fchmod(writer.fileno(), file.mode)
                os.fsync(writer.fileno())  # durable before the rename that publishes it
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=folder)
        raise
    return temp
