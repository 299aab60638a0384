"""Restoring outputs from a cache entry that is treated as untrusted input.

A cache entry (a shared cache folder, or a registry repository that anyone with
push rights fills) only proposes files. A restore writes only regular files, only
under the paths the action declares (`declared_outputs`), with mode 0644 or 0755,
only bytes whose sha256 and size were checked while copying them, and never
through a symbolic link; temporaries live in the target folder itself. Anything
else raises `RefusedEntry`: the caller logs it and treats the entry as a miss.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import hashlib
import os
import re
import secrets
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from shipyard._fs import TEMP_PREFIX
from shipyard.artifacts import Artifact
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
    """The repository-relative paths an action may write, as glob patterns.

    A pattern is a tuple of path parts, each matched against one part (fnmatch,
    so a `*` never crosses a `/`); a last part `**` matches one or more parts.
    """

    patterns: tuple[tuple[str, ...], ...]

    @classmethod
    def dist(cls) -> Declared:
        """Anything under dist/: for callers that know no action."""
        return cls((("dist", "**"),))

    def allows(self, parts: Sequence[str]) -> bool:
        """Whether the path made of `parts` matches one of the patterns."""
        return any(_matches(pattern, parts) for pattern in self.patterns)

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
    return Declared(tuple((*dist, *p) for p in output_patterns(action.kind, binary)))


def checked_path(value: object, declared: Declared) -> tuple[str, ...]:
    """The parts of an entry's output path, if it is relative, normalised, has no
    hidden part (.git, .tmp-*) and is one `declared` allows; else RefusedEntry."""
    if not isinstance(value, str) or not value or "\0" in value:
        raise RefusedEntry(f"output path {value!r} is not a path")
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


def checked_description(value: object) -> Mapping[str, object]:
    """`value` if it describes an artifact (kind, binary, platform, metadata); else RefusedEntry."""
    try:
        Artifact.described(value, Path(), "", 0)
    except ValueError as exc:
        raise RefusedEntry(f"the artifact description: {exc}") from None
    assert isinstance(value, Mapping)
    return value


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
    about: Mapping[str, object]  # the artifact's kind, binary, platform and metadata


@dataclass
class _Pending:
    folder: int  # the target folder, opened without following symbolic links
    temp: str
    name: str


def place_files(
    repo: Path, files: Sequence[PlacedFile], holds: Holds | None = None
) -> tuple[tuple[Artifact, ...], list[tuple[Path, str]]]:
    """Put `files` in place under `repo`: all of them, or (RefusedEntry) none.

    Every folder on the way is opened without following symbolic links (one
    planted in dist/ is refused, not written through), each file is copied into
    a temporary in its own target folder while its sha256 and size are checked,
    and only when all are whole are they renamed into place. A file already in
    place (a regular file with the bytes: `holds` says, else its hash) is left
    alone. Returns the artifacts and the (target, sha256) pairs written or checked.
    """
    if not files:
        raise RefusedEntry("it names no outputs")  # every action makes at least one
    if len({f.parts for f in files}) != len(files):
        raise RefusedEntry("two outputs have the same path")
    with _Folders(repo) as folders:
        pending: list[_Pending] = []
        seen: list[tuple[Path, str]] = []
        try:
            for file in files:
                folder = folders.open(file.parts[:-1])
                target = repo.joinpath(*file.parts)
                if _in_place(folder, file, target, holds):
                    seen.append((target, file.sha256))
                    continue
                pending.append(_Pending(folder, _copy_checked(folder, file), file.parts[-1]))
                seen.append((target, file.sha256))
            for item in pending:
                os.replace(item.temp, item.name, src_dir_fd=item.folder, dst_dir_fd=item.folder)
                item.temp = ""
        finally:
            for item in pending:
                if item.temp:
                    with contextlib.suppress(OSError):
                        os.unlink(item.temp, dir_fd=item.folder)
    restored = tuple(
        Artifact.described(f.about, repo.joinpath(*f.parts), f.sha256, f.size) for f in files
    )
    return restored, seen


class _Folders:
    """The folders of a restore, opened from the repository down without following links."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self._open: dict[tuple[str, ...], int] = {}

    def __enter__(self) -> _Folders:
        self._open[()] = os.open(self.repo, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        return self

    def __exit__(self, *_: object) -> None:
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
                with contextlib.suppress(FileExistsError):
                    os.mkdir(key[-1], 0o755, dir_fd=fd)
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
    temp = f"{TEMP_PREFIX}{file.parts[-1]}.{secrets.token_hex(6)}"
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
