"""The bootstrap of every shipyard zipapp, copied verbatim into the archive as _shipyard/boot.py.

Standard library only, and it imports little: startup time is the product. The
archive's site-packages is unpacked once per build into a cache folder, and the program
runs from there exactly as from a virtualenv: modules are files on disk (``__file__``,
``importlib.resources`` and ``importlib.metadata`` see what they would in a venv),
``.pth`` files are processed, the interpreter's own site-packages are left out, and
Python caches bytecode next to the modules. (Importing from the archive instead was
dropped: no faster cold, 1.7x slower warm, and it broke 3 of 10 corpus applications.)

The cache is code that runs, so it is used only when no one else could have written it:
the root and every folder under it owned by this user (or root) and not writable by
group or others, every folder above the root owned by this user or root and either not
writable by group or others or sticky (as /tmp is). Otherwise the zipapp says why on
stderr and runs without it: it unpacks into a private temporary folder, removed at
exit. So it does, with a one-line warning, when the default cache folder cannot be
written (a home that is not writable); a folder named by $SHIPYARD_ZIPAPP_ROOT that
cannot be written is an error (exit status 2).

Every running start holds a shared lock on its build folder's ``use`` file and touches
it; when a start makes a new build folder, the folders of older builds of the same
binary beyond the newest $SHIPYARD_ZIPAPP_KEEP (default 3) are removed, unless a
running start holds them.

__main__.py (MAIN) compiles on every Python from 2.7 on and refuses one older than 3.7
with one line before this module, which needs 3.7, is compiled.

Linux, macOS and Windows: the OS is asked in one place, `_os()`, which tests replace
to run the macOS and Windows logic anywhere. The cache is under XDG_CACHE_HOME (or
~/.cache) on Linux, ~/Library/Caches on macOS and %LOCALAPPDATA% on Windows. Windows
has no POSIX owners or modes, so the trust checks are skipped there (the default
folder is the user's own by its ACL); its locks are msvcrt byte locks on a lock file
beside a temporary folder, and a build folder is held by keeping its use file open,
which makes Windows refuse the rename that removes the folder.
"""

from __future__ import annotations

import marshal
import os
import stat
import sys
import zipimport

# Not `typing.TYPE_CHECKING`: importing typing (or json, which imports re) costs more
# than the rest of the bootstrap on a Python that has not loaded them yet.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

__all__ = [
    "KEEP_ENV",
    "ROOT_ENV",
    "BootError",
    "UntrustedCache",
    "UnwritableCache",
    "cache_root",
    "check_target",
    "hold",
    "machine",
    "prune",
    "system",
    "unpack",
    "unpack_private",
    "untrusted",
]

BUILD_INFO = "_shipyard/build.json"
SOURCE = "_shipyard/boot.py"
# This module compiled for one interpreter, named by that interpreter's magic number.
CODE = "_shipyard/boot-%s.bin"
# What the bootstrap reads: the build info as marshal format 2 (readable by every
# Python 3, so even a wrong interpreter gets the message; json would import re).
BOOT_DATA = "_shipyard/boot.marshal"
SITE = "site"
# The archive's __main__.py. Python compiles it twice on every start (zipimport asks
# for the file name, then the code), so it is kept tiny: it runs this module from
# code compiled at build time when the interpreter matches, else from source. It must
# compile on every Python from 2.7 on (no f-strings, annotations or walrus) so that an
# older one than this module compiles on (3.7: `from __future__ import annotations`)
# gets check_target's one line and exit status 2 instead of a SyntaxError traceback:
# the rest of the bootstrap is compiled only after that check.
MAIN = """\
import sys
if sys.version_info < (3, 7):
    def _old():
        import json, os, zipimport
        archive = os.path.dirname(os.path.abspath(__file__))
        name, want = os.path.basename(archive), "3"
        try:
            data = zipimport.zipimporter(archive).get_data("_shipyard/build.json")
            info = json.loads(data.decode("utf-8"))
            name, want = info["binary"], info["python"]
        except Exception:
            pass
        have = "%d.%d.%d" % tuple(sys.version_info[:3])
        sys.stderr.write("%s: built for Python %s, but this is Python %s (%s); run it with "
                         "python%s\\n" % (name, want, have, sys.executable, want))
        sys.exit(2)
    _old()
import marshal, os, zipimport
def _boot():
    archive = os.path.dirname(os.path.abspath(__file__))
    reader = zipimport.zipimporter(archive)
    try:
        import _frozen_importlib_external as external
        name = "_shipyard/boot-%s.bin" % external.MAGIC_NUMBER.hex()
        code = marshal.loads(reader.get_data(name))
    except (ImportError, AttributeError, OSError, ValueError, EOFError, TypeError):
        path = os.path.join(archive, "_shipyard", "boot.py")
        code = compile(reader.get_data("_shipyard/boot.py"), path, "exec", dont_inherit=True)
    module = type(sys)("_shipyard_boot")
    sys.modules[module.__name__] = module
    exec(code, module.__dict__)
    module.main(archive)
_boot()
"""
ROOT_ENV = "SHIPYARD_ZIPAPP_ROOT"
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
# OCI architecture -> the names os.uname() (or, on Windows, the interpreter's build)
# gives that machine.
MACHINES = {
    "amd64": ("x86_64", "amd64"),
    "arm64": ("aarch64", "arm64", "armv8l"),
    "arm/v7": ("armv7l", "armv8l"),
    "386": ("i386", "i686"),
    "ppc64le": ("ppc64le",),
    "s390x": ("s390x",),
    "riscv64": ("riscv64",),
}


# Open flags that exist only on some systems: no symlink following and no inheritance
# where there are, binary (untranslated) writes on Windows.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOINHERIT", 0)
_BINARY = getattr(os, "O_BINARY", 0)
# Beside a temporary folder on Windows (directories cannot be opened and locked there).
LOCK_SUFFIX = ".lock"


def _os() -> str:
    """This machine's OS as the manifest names it: linux, darwin or windows (others as
    sys.platform says). The one place the bootstrap asks: tests replace it."""
    return {"win32": "windows", "cygwin": "windows"}.get(sys.platform, sys.platform)


def system() -> str:
    """This machine's OS in manifest terms (see `_os`)."""
    return _os()


def _posix() -> bool:
    """Whether files have POSIX owners, modes and flock (every OS but Windows)."""
    return _os() != "windows"


def machine() -> str:
    """This interpreter's machine: os.uname()'s name for it, or on Windows the one its
    build names in sys.version (AMD64, ARM64), which an emulated x64 Python on an ARM
    laptop reports as amd64, as its wheels must be."""
    if _os() == "windows":
        return next((n.lower() for n in ("ARM64", "AMD64") if n in sys.version), "x86")
    return os.uname().machine if hasattr(os, "uname") else "unknown"


def _uid() -> int | None:
    """This user's id, or None where files have no POSIX owner (Windows)."""
    return os.geteuid() if _posix() and hasattr(os, "geteuid") else None


class BootError(Exception):
    """Why the zipapp cannot start on this machine; shown as one line, exit status 2."""


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


def check_target(
    info: Mapping[str, Any], version: tuple[int, int], system: str, machine: str
) -> None:
    """Refuse a Python or a platform the archive was not built for, naming the fix.

    `pythons` (several target Pythons) lists every Python the archive runs on, else
    `python` is the one; `built_pythons` is every Python its build made archives for,
    so a Python with an archive of its own is pointed to it.
    """
    want = [str(v) for v in info.get("pythons") or (info["python"],)]
    have = f"{version[0]}.{version[1]}"
    named = info.get("archive_python")
    stem = f"{info['binary']}-{info['version']}" + (f"-py{named}" if named else "")
    if have not in want:
        run = " or ".join(f"python{v}" for v in want)
        other = ""
        if have in [str(v) for v in info.get("built_pythons") or ()]:
            other = f", or use {info['binary']}-{info['version']}-py{have}*.pyz, built for it"
        raise BootError(
            f"built for Python {', '.join(want)}, but this is Python {have} "
            f"({sys.executable}); run it with {run}{other}"
        )
    platforms = [str(p) for p in info["platforms"]]
    machines = [p.partition("/")[2] for p in platforms if p.partition("/")[0] == system]
    if info["platform"] == "any" and machines:
        return  # pure Python: any machine of a targeted OS
    if any(machine in MACHINES.get(arch, (arch,)) for arch in machines):
        return
    here = next((a for a, names in MACHINES.items() if machine in names), machine)
    raise BootError(
        f"built for {', '.join(platforms)}, but this machine is {system}/{here}; "
        f"use {stem}-{system}_{here.replace('/', '_')}.pyz"
    )


def cache_root(environ: Mapping[str, str]) -> str:
    """Where builds unpack: $SHIPYARD_ZIPAPP_ROOT, else the user cache folder of this OS
    ($XDG_CACHE_HOME or ~/.cache on Linux, ~/Library/Caches on macOS, %LOCALAPPDATA%
    on Windows), in shipyard/zipapps."""
    if environ.get(ROOT_ENV):
        return environ[ROOT_ENV]
    home = os.path.expanduser("~")
    system = _os()
    if system == "windows":
        base = environ.get("LOCALAPPDATA") or os.path.join(home, "AppData", "Local")
    elif system == "darwin":
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
    uid = _uid()
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


def _makedirs(path: str) -> None:
    """Make `path` and its missing parents, each private to this user (mode 0700)."""
    parent = os.path.dirname(path)
    if parent != path and not os.path.isdir(parent):
        _makedirs(parent)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not os.path.isdir(path):
            raise


def _lock(fd: int, *, wait: bool) -> None:
    """Lock the open file `fd` exclusively; OSError when `wait` is false and it is held."""
    if _posix():
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    else:
        import msvcrt

        # A byte lock on the first byte; LK_LOCK retries for 10 s, then raises OSError.
        msvcrt.locking(fd, msvcrt.LK_LOCK if wait else msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]


def _open_lock(folder: str) -> int:
    """A descriptor to lock that stands for `folder`: the folder itself, or on Windows
    (where folders cannot be opened) the file `folder`.lock beside it."""
    if _posix():
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
    return os.open(folder + LOCK_SUFFIX, os.O_RDWR | os.O_CREAT | _BINARY | _NOFOLLOW, 0o600)


def _release(folder: str, fd: int) -> None:
    """Let go of the lock `fd` of `folder` (from `_locked_temp`); its lock file too."""
    os.close(fd)
    if not _posix():
        # Not contextlib.suppress: the warm start does not import contextlib.
        try:  # noqa: SIM105
            os.remove(folder + LOCK_SUFFIX)
        except OSError:
            pass  # another start locked it meanwhile: that start removes it


def _same(fd: int, folder: str) -> bool:
    """Whether the lock `fd` still stands for `folder` (not swept and made again)."""
    try:
        if _posix():
            return os.path.samestat(os.fstat(fd), os.lstat(folder))
        return os.path.isdir(folder)
    except OSError:
        return False


def _locked_temp(parent: str, prefix: str) -> tuple[str, int]:
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
        _release(temp, fd)  # swept between its making and its locking: make another
    raise OSError(f"temporary folders in {parent} keep disappearing")


def _sweep(parent: str, prefix: str) -> None:
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

    uid = _uid()
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
            if locked and not _posix():
                _release(path, fd)  # and the lock file, the folder's or the one made here
            else:
                os.close(fd)  # a live start's lock file stays: it is its lock


def _fsync(path: str) -> None:
    if not _posix():
        return  # a folder cannot be opened on Windows; NTFS journals the rename
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Threads that write an unpacked build: file creation waits on the disk and zlib
# releases the GIL, so a few threads unpack a large site about twice as fast as one.
UNPACK_THREADS = 4
# What each of them holds of a member at a time while unpacking it.
CHUNK = 1 << 20


def _extract(archive: str, folder: str) -> None:
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
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC | _BINARY
    posix = _posix()
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
        _sweep(parent, UNPACK_PREFIX)
        return target
    import shutil

    temp = ""
    lock = -1
    try:
        _makedirs(parent)
        reason = untrusted(root, parent)  # someone may have made it first
        if reason:
            raise UntrustedCache(reason)
        _sweep(parent, UNPACK_PREFIX)
        temp, lock = _locked_temp(parent, UNPACK_PREFIX)
        _extract(archive, temp)
        try:
            os.rename(temp, target)
        except OSError:
            if not os.path.isdir(target):
                raise
        else:
            _fsync(parent)
    except OSError as exc:
        raise UnwritableCache(parent, str(exc.strerror or exc)) from None
    finally:
        if temp and os.path.isdir(temp):
            shutil.rmtree(temp, ignore_errors=True)
        if lock >= 0:
            _release(temp, lock)
    return target


def _remove(folder: str, lock: int) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    _release(folder, lock)


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
        _sweep(base, PRIVATE_PREFIX)
        folder, lock = _locked_temp(base, PRIVATE_PREFIX)
    except OSError as exc:
        raise BootError(
            f"cannot unpack the zipapp into {base} ({exc.strerror or exc}); "
            f"set TMPDIR or {ROOT_ENV} to a directory only you can write"
        ) from None
    atexit.register(_remove, folder, lock)
    target = os.path.join(folder, SITE)
    try:
        os.mkdir(target, 0o700)
        _extract(archive, target)
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
    posix = _posix()
    uid = _uid()
    path = os.path.join(home, USE)
    try:
        for _ in range(5):
            _makedirs(home)
            reason = untrusted(root, home)
            if reason:
                raise UntrustedCache(reason)
            made = True
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _BINARY, 0o600)
            except FileExistsError:
                made = False
                fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _BINARY)
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


def _is_build_id(name: str) -> bool:
    return len(name) == 64 and all(c in "0123456789abcdef" for c in name)


def prune(root: str, binary: str, keep: int, current: str = "") -> list[str]:
    """Remove this user's build folders of `binary` under `root` beyond the `keep` most
    recently used (`current`, a build id, counts as one and is never removed); the
    removed build ids. A folder a running start holds is left alone: on POSIX systems
    it is locked; on Windows its use file is open, so its rename fails.
    """
    import shutil

    uid = _uid()
    posix = _posix()
    try:
        names = os.listdir(root)
    except OSError:
        return []
    if any(name.startswith(REMOVE_PREFIX) for name in names):
        _sweep(root, REMOVE_PREFIX)  # a removal a crash interrupted: finish it
    used: list[tuple[float, str]] = []
    for name in names:
        path = os.path.join(root, name)
        if name == current or not _is_build_id(name):
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
            fd = os.open(os.path.join(home, USE), os.O_RDONLY | _NOFOLLOW)
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


def _keep(environ: Mapping[str, str]) -> int:
    try:
        return max(int(environ.get(KEEP_ENV, KEEP)), 1)
    except ValueError:
        return KEEP


def _open_nofollow(path: str, flags: int) -> int:
    return os.open(path, flags | _NOFOLLOW)


def _site(archive: str, info: Mapping[str, Any], root: str, home: str) -> str:
    """Where the unpacked site is: in the build's folder `home` when it can be trusted
    and written, held while this process runs (a new one prunes older builds of the
    binary); else, after one warning line, in a private temporary folder. BootError when
    the zipapp cannot run at all (including $SHIPYARD_ZIPAPP_ROOT not writable).
    """
    site = os.path.join(home, SITE)
    reason = untrusted(root, site)
    warning = ""
    if not reason:
        try:
            made = hold(root, home, str(info["binary"]))
            unpacked = unpack(archive, site, root)
            if made:
                prune(root, str(info["binary"]), _keep(os.environ), os.path.basename(home))
            return unpacked
        except UntrustedCache as exc:
            reason = str(exc)
        except UnwritableCache as exc:
            if os.environ.get(ROOT_ENV):
                raise  # the folder asked for cannot be used: say so, and how to fix it
            # The default folder: a home that is not writable (a service account, a
            # read-only root file system) is no reason not to run.
            warning = (
                f"{info['binary']}: warning: cannot write the zipapp cache in {root} "
                f"({exc.reason}); running from a private temporary folder removed at "
                f"exit (set {ROOT_ENV} to a writable directory to keep the cache)\n"
            )
    if reason:
        warning = (
            f"{info['binary']}: warning: not using the zipapp cache, {reason}; running "
            f"without it (make the folder yours and not writable by group or others, "
            f"or set {ROOT_ENV} to one that is)\n"
        )
    sys.stderr.write(warning)
    return unpack_private(archive)


def _activate(site_dir: str, archive: str) -> None:
    """Make sys.path a virtualenv's: the unpacked site where the interpreter's own
    site-packages were (those are left out), after the standard library, with its
    .pth files processed; the archive itself is taken off the path."""
    if sys.path and os.path.abspath(sys.path[0]) == archive:
        del sys.path[0]
    site_module = sys.modules.get("site")  # absent under python -S: no .pth files then
    theirs: set[str] = set()
    if site_module is not None:
        theirs.update(site_module.getsitepackages())
        theirs.add(site_module.getusersitepackages())
    at = next((i for i, entry in enumerate(sys.path) if entry in theirs), len(sys.path))
    sys.path[:] = [entry for entry in sys.path if entry not in theirs]
    sys.path.insert(at, site_dir)
    if site_module is not None:
        site_module.addsitedir(site_dir)


def main(archive: str) -> None:
    """Check the target, unpack the site of `archive` (once), run the entry point, exit."""
    info = marshal.loads(zipimport.zipimporter(archive).get_data(BOOT_DATA))
    build_id = str(info["build_id"])
    if not _is_build_id(build_id):
        sys.stderr.write(f"{info['binary']}: the archive is damaged (bad build id)\n")
        raise SystemExit(2)
    root = os.path.realpath(cache_root(os.environ))
    try:
        check_target(info, (sys.version_info[0], sys.version_info[1]), _os(), machine())
        site = _site(archive, info, root, os.path.join(root, build_id))
    except BootError as exc:
        sys.stderr.write(f"{info['binary']}: {exc}\n")
        raise SystemExit(2) from None
    _activate(site, archive)
    module, _, attrs = str(info["entrypoint"]).partition(":")
    __import__(module)
    target: Any = sys.modules[module]
    for attr in attrs.split("."):
        target = getattr(target, attr)
    sys.exit(target())
