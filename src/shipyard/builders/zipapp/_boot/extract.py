"""Copying the archive's site into a new folder: safe names, bounded memory and disk.

Standard library only, as every module of the bootstrap; a first start (or one whose
build folder was removed) is the only one that runs it.
"""

from __future__ import annotations

import os

from .host import BINARY, CLOEXEC, NOFOLLOW, BootError, is_posix
from .layout import SITE
from .trust import ROOT_ENV

# Not `typing.TYPE_CHECKING`: importing typing (or json, which imports re) costs more
# than the rest of the bootstrap on a Python that has not loaded them yet.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

__all__ = ["BLOCK", "CHUNK", "SPARE_BYTES", "UNPACK_THREADS", "extract"]

# Threads that write an unpacked build: file creation waits on the disk and zlib
# releases the GIL, so a few threads unpack a large site about twice as fast as one.
UNPACK_THREADS = 4
# What each of them holds of a member at a time while unpacking it.
CHUNK = 1 << 20


def extract(archive: str, folder: str) -> None:
    """Copy the archive's site into `folder`, a new folder, then flush it to disk.

    Every file is created exclusively with mode 0755 or 0644 (no links, no setuid, no
    world-writable file, no name twice); a name that is not plain and relative (or holds
    a backslash or a ':', separators and drives on Windows), or that is both a file and a
    folder, or a file whose bytes fail their CRC is a damaged archive (BootError). A site
    that does not fit in the free space of `folder`'s file system is refused before any
    file is written (BootError). Files are copied a CHUNK at a time, so the memory a
    first start takes does not grow with the size of a member.
    """
    import zipfile
    import zlib

    with zipfile.ZipFile(archive) as source:
        members = []
        for info in source.infolist():
            name = info.filename
            if info.is_dir() or not name.startswith(SITE + "/"):
                continue
            parts = name.split("/")[1:]
            # Only plain relative names: nothing may land outside `folder`. Windows also
            # splits on a backslash and reads `C:` as a drive (`site/..\\x`, `site/C:\\x`);
            # a zipapp shipyard builds holds neither character.
            if (
                "\0" in name
                or "\\" in name
                or ":" in name
                or any(part in ("", ".", "..") for part in parts)
            ):
                raise BootError(f"the archive is damaged: it holds an unsafe name {name!r}")
            members.append((info, os.path.join(folder, *parts)))
        _check_room(folder, members)
        try:
            made = {folder}
            for parent in sorted({os.path.dirname(path) for _, path in members}):
                if parent not in made:  # `folder` is new: every folder in it is ours
                    _makedirs_public(parent, made)
            _write_members(source, members)
        except (FileExistsError, NotADirectoryError, IsADirectoryError) as exc:
            raise BootError(
                f"the archive is damaged: {exc.filename!r} is a file and a folder, or there twice"
            ) from None
        except (zipfile.BadZipFile, EOFError, zlib.error) as exc:
            # A CRC that fails, a stream cut short or bytes that do not inflate.
            raise BootError(f"the archive is damaged: {exc or type(exc).__name__}") from None
    # One flush of everything instead of one per file: the folder is renamed into place
    # only once its files are on disk, so a power cut never leaves a half-written build
    # that looks complete. (Windows has no sync: each file is flushed as it is written.)
    if hasattr(os, "sync"):
        os.sync()


# What a file takes on disk beyond its bytes is counted as one block each, and the
# unpacking leaves SPARE_BYTES free: a first start never fills a disk.
BLOCK = 4096
SPARE_BYTES = 16 << 20


def _check_room(folder: str, members: Sequence[tuple[Any, str]]) -> None:
    """Refuse (BootError) a site whose members' declared sizes do not fit in the free
    space of `folder`'s file system with SPARE_BYTES to spare. The sizes are the ones
    the archive declares, which the unpacking never writes past (zipfile stops a
    member at its declared size); a file system that cannot say is not checked."""
    import shutil

    needed = SPARE_BYTES + sum(-(-info.file_size // BLOCK) * BLOCK + BLOCK for info, _ in members)
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return
    if needed > free:
        raise BootError(
            f"not enough disk space to unpack the zipapp into {folder}: its site needs "
            f"{needed} bytes ({len(members)} files, {SPARE_BYTES} bytes kept spare) and "
            f"the file system has {free} bytes free; free some space, or set {ROOT_ENV} to "
            "a folder on a file system with room"
        )


def _write_members(source: Any, members: Sequence[tuple[Any, str]]) -> None:
    """Write each (zip entry, path) of `members`, with a few threads when they are many."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC | BINARY
    posix = is_posix()
    flush = not hasattr(os, "sync")

    def write(share: Sequence[tuple[Any, str]]) -> None:
        for info, path in share:
            mode = 0o755 if (info.external_attr >> 16) & 0o111 else 0o644
            fd = os.open(path, flags, mode)
            try:
                if posix:  # Windows has no modes to set (and no fchmod before 3.13)
                    os.fchmod(fd, mode)  # exactly 0755 or 0644, whatever the umask
                # A chunk at a time: a small archive may hold a huge member (zeros
                # compress 1000:1). The stream raises BadZipFile at its end when the
                # bytes fail their CRC; what was written by then is in the temporary
                # folder, which the caller removes.
                with source.open(info) as stream:
                    while True:
                        chunk = stream.read(CHUNK)
                        if not chunk:
                            break
                        view = memoryview(chunk)
                        while view:
                            view = view[os.write(fd, view) :]
                if flush:
                    os.fsync(fd)
            finally:
                os.close(fd)

    count = min(UNPACK_THREADS, max(len(members) // 64, 1))
    if count == 1:
        write(members)
        return
    import threading

    failures: list[BaseException] = []

    def run(share: Sequence[tuple[Any, str]]) -> None:
        try:
            write(share)
        except BaseException as exc:  # re-raised in the calling thread
            failures.append(exc)

    threads = [
        threading.Thread(target=run, args=(members[index::count],), daemon=True)
        for index in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def _makedirs_public(path: str, made: set[str]) -> None:
    """Make `path` and its missing parents up to a folder in `made` (mode 0755)."""
    parent = os.path.dirname(path)
    if parent not in made:
        _makedirs_public(parent, made)
    os.mkdir(path, 0o755)
    made.add(path)
