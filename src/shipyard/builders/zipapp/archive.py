"""A zipapp archive: what it holds, how it is written, and its build info read back.

The archive is a shebang line and a zip (`write_archive`): the bootstrap as
__main__.py, the build info, and the site-packages resolved for the target under
site/ (`layout`), every entry with the same time and a normalised mode, so the
bytes depend only on the names, contents and options.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import pkgutil
import stat
import sys
import time
import zipfile
from collections.abc import Mapping, Sequence
from functools import cache
from importlib.util import MAGIC_NUMBER, source_hash
from pathlib import Path
from types import CodeType

from shipyard.builders.zipapp._boot.layout import (
    BOOT_DATA,
    BUILD_INFO,
    CODE,
    MAIN,
    PARTS,
    SITE,
    SOURCE,
)
from shipyard.builders.zipapp.writer import Entry, write_zip
from shipyard.errors import ShipyardError
from shipyard.stamp import ZIP_EPOCH

__all__ = ["DEFAULT_SHEBANG", "Entry", "boot_digest", "layout", "write_archive", "zipapp_info"]

DEFAULT_SHEBANG = "/usr/bin/env python3"
# Deflate level 4: on black's site-packages half the time of level 6 for 4% more bytes.
_LEVEL = 4


# The package whose modules are the bootstrap, copied into every archive.
_BOOT = "shipyard.builders.zipapp._boot"


@cache
def _boot_sources() -> dict[str, bytes]:
    """The source of each module of the bootstrap (`PARTS`), read as package data so it
    works from an archive too."""
    # pkgutil asks the package's loader, so this works from a zipapp too, and it
    # loads faster than importlib.resources (every no-op build hashes these files).
    sources: dict[str, bytes] = {}
    for part in PARTS:
        data = pkgutil.get_data(_BOOT, "__init__.py" if part == "boot" else f"{part}.py")
        if data is None:
            raise ShipyardError(f"{_BOOT} has no {part} module: a damaged installation")
        sources[part] = data
    return sources


def zipapp_info(zipapp: Path) -> dict[str, object]:
    """The build info a shipyard zipapp carries (`_shipyard/build.json`); ShipyardError
    when `zipapp` is not one."""
    try:
        with zipfile.ZipFile(zipapp) as archive:
            info = json.loads(archive.read(BUILD_INFO))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise ShipyardError(f"{zipapp} is not a shipyard zipapp: {exc}") from None
    if not isinstance(info, dict):
        raise ShipyardError(f"{zipapp} is not a shipyard zipapp: its build info is not a mapping")
    return info


def write_archive(
    target: Path,
    shebang: str,
    entries: Sequence[Entry],
    epoch: int,
    *,
    compress: bool,
    threads: int = 1,
) -> str:
    """Write a shebang line, then a zip of `entries` in name order; the file's sha256.

    Every entry gets the same time (`epoch`, clamped to 1980) and a normalised mode,
    so the bytes depend only on the names, contents and options, not on `threads`,
    how many threads deflate the entries at once.
    """
    clock = time.gmtime(max(epoch, ZIP_EPOCH))
    stamp = (clock.tm_year, clock.tm_mon, clock.tm_mday, clock.tm_hour, clock.tm_min, clock.tm_sec)
    files = {e.name: e for e in entries}
    # No folder entries: the bootstrap makes the folders of the files it unpacks.
    members = [files[name] for name in sorted(files)]
    shebang_line = b"#!" + shebang.removeprefix("#!").strip().encode() + b"\n"
    with target.open("wb") as handle:
        return write_zip(
            handle, shebang_line, members, stamp, _LEVEL if compress else None, threads
        )


def _site_files(site: Path) -> dict[str, Path]:
    """The files of an installed site by relative name, in name order.

    Whatever an installer (or a hostile wheel) could leave that would smuggle
    something in is refused: a symlink out of the site, a pipe or device file, a
    name with a backslash or a ':' (a separator and a drive on Windows, which the
    bootstrap refuses to unpack on any system).
    A symlink to a file inside is read through; one to a folder is left out.
    """
    inside = site.resolve()
    files: dict[str, Path] = {}
    for folder, dirs, names in os.walk(site):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted([*names, *dirs]):
            path = Path(folder) / name
            rel = path.relative_to(site).as_posix()
            if "\\" in name:  # a folder separator to Windows unzip tools: '..\\..\\x' escapes
                raise ShipyardError(f"{path}: a backslash in a name; a zipapp holds plain names")
            if ":" in name:  # a drive to Windows: 'C:x' is not inside the site there
                raise ShipyardError(f"{path}: a ':' in a name; a zipapp holds plain names")
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                try:
                    real = path.resolve()
                except (OSError, RuntimeError):
                    raise ShipyardError(f"{path}: a symlink loop in the installed site") from None
                if not real.is_relative_to(inside):
                    raise ShipyardError(
                        f"{path}: a symlink to '{os.readlink(path)}' leaves the installed "
                        f"site {site}; a zipapp holds only what is inside it"
                    )
                if not path.is_file():
                    continue
            elif stat.S_ISDIR(mode):
                continue
            elif not stat.S_ISREG(mode):
                raise ShipyardError(f"{path}: not a regular file; a zipapp holds only files")
            if not name.endswith(".pyc") and not rel.startswith("bin/"):
                files[rel] = path
    return dict(sorted(files.items()))


def _importable(rel: str) -> bool:
    """Whether the file `rel` of a site is a module Python could import by name."""
    parts = rel.removesuffix(".py").split("/")
    return rel.endswith(".py") and all(p.isidentifier() for p in parts)


def _pyc(rel: str, data: bytes) -> bytes:
    code = compile(data, f"{SITE}/{rel}", "exec", dont_inherit=True)
    # Unchecked hash-based (PEP 552): unpacking sets no meaningful timestamps, and an
    # unpacked build never changes, so Python need not read the source to trust it.
    return MAGIC_NUMBER + (1).to_bytes(4, "little") + source_hash(data) + _marshal(code)


def _marshal(code: CodeType | tuple[CodeType, ...]) -> bytes:
    """Code as marshal format 2: formats 3+ mark shared objects by reference count,
    so their bytes depend on what else the process imported (not reproducible)."""
    return marshal.dumps(code, 2)


def _cached_pyc(rel: str) -> str:
    """Where Python looks for the bytecode of the module file `rel` (its __pycache__)."""
    folder, _, name = rel.rpartition("/")
    cached = f"__pycache__/{name[:-3]}.{sys.implementation.cache_tag}.pyc"
    return f"{folder}/{cached}" if folder else cached


def layout(site: Path, info: Mapping[str, object], *, compile_pyc: bool = False) -> list[Entry]:
    """Every entry of the archive of `site`: payload, bootstrap and build info.

    `info` is the build info without the keys derived here: native (whether the site
    holds compiled code), compiled and build_id (a hash of the rest). With
    `compile_pyc` the bytecode of every module is shipped in its __pycache__, where
    Python finds it once the site is unpacked.
    """
    files = _site_files(site)
    from shipyard.builders.distributions import NATIVE

    sources = _boot_sources()
    entries = [Entry("__main__.py", MAIN.encode())]
    entries += [Entry(SOURCE % part, source) for part, source in sources.items()]
    accepted = info.get("pythons") or [info.get("python")]
    if "{}.{}".format(*sys.version_info[:2]) in accepted:  # type: ignore[operator]
        codes = tuple(
            compile(source, SOURCE % part, "exec", dont_inherit=True)
            for part, source in sources.items()
        )
        entries.append(Entry(CODE % MAGIC_NUMBER.hex(), _marshal(codes)))
    for rel, path in files.items():
        data = path.read_bytes()
        executable = bool(NATIVE.search(rel)) or os.access(path, os.X_OK)
        entries.append(Entry(f"{SITE}/{rel}", data, 0o755 if executable else 0o644))
        if compile_pyc and _importable(rel):
            entries.append(Entry(f"{SITE}/{_cached_pyc(rel)}", _pyc(rel, data)))
    digest = hashlib.sha256()
    for entry in sorted(entries, key=lambda e: e.name):
        digest.update(f"{entry.name}\0{entry.mode:o}\0".encode())
        digest.update(hashlib.sha256(entry.data).digest())
    full = {
        **info,
        "native": any(NATIVE.search(rel) for rel in files),
        "compiled": compile_pyc,
        "build_id": digest.hexdigest(),
    }
    human = json.dumps(full, indent=2, sort_keys=True).encode() + b"\n"
    # Format 2 has no back-references, so equal values always marshal to equal bytes.
    return [*entries, Entry(BUILD_INFO, human), Entry(BOOT_DATA, marshal.dumps(full, 2))]


def boot_digest() -> str:
    """What an action's key holds of the bootstrap: the sha256 of its modules' sources."""
    digest = hashlib.sha256()
    for part, source in _boot_sources().items():
        digest.update(f"{part}\0".encode())
        digest.update(hashlib.sha256(source).digest())
    return digest.hexdigest()
