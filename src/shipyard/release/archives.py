"""Release archives: one download per platform of a binary's zipapp (issue 15, item 1).

    <binary>-<version>-<os>-<arch>.tar.gz     linux, darwin
    <binary>-<version>-windows-<arch>.zip     windows

Each holds one folder named like the archive (without the suffix), with

    <binary>          the zipapp, mode 0755: `./<binary>` runs it (its shebang)
    <binary>.pyz      on Windows instead, with <binary>.cmd, the launcher (no shebangs there)
    <binary>.cmd      runs `py -<python> "%~dp0<binary>.pyz" %*`
    LICENSE...        the project's license file, under its own name
    README.txt        what it is and how to run it

Archives are reproducible: entries in name order, one timestamp (the build's clock),
modes 0755 (folders, the program) or 0644, owner 0/0 with no names, a gzip header
without a file name or time of its own. The license comes from the checkout, under
the rules wheel sources follow (`find_license`).
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from shipyard._fs import TEMP_PREFIX
from shipyard.builders.zipapp import launcher, launcher_name, zipapp_info
from shipyard.errors import ShipyardError
from shipyard.files.shipped import read_shipped_file
from shipyard.stamp import ZIP_EPOCH

__all__ = [
    "LICENSE_NAMES",
    "Member",
    "archive_name",
    "find_license",
    "members",
    "readme",
    "write_release_archive",
    "zipapp_info",
]

# The license files a project may have at its root, in the order they are looked for.
LICENSE_NAMES = (
    "LICENSE",
    "LICENSE.txt",
    "LICENSE.md",
    "LICENCE",
    "LICENCE.txt",
    "COPYING",
    "COPYING.txt",
)
# Deflate level for the archives: downloads are made once and fetched many times.
_LEVEL = 9


@dataclass(frozen=True)
class Member:
    """One file of a release archive: its name inside the top folder, bytes and mode."""

    name: str
    data: bytes
    mode: int = 0o644


def _split(platform: str) -> tuple[str, str]:
    os_name, _, arch = platform.partition("/")
    if not os_name or not arch:
        raise ShipyardError(f"{platform!r} is not a platform; write os/arch, e.g. darwin/arm64")
    return os_name, arch.replace("/", "-")


def archive_name(binary: str, version: str, platform: str, python: str | None = None) -> str:
    """`<binary>-<version>-<os>-<arch>.tar.gz`, or `.zip` for Windows
    (`linux/arm/v7` gives `linux-arm-v7`); with `python` (a zipapp built for one of
    several target Pythons) `<binary>-<version>-py<python>-<os>-<arch>...`."""
    os_name, arch = _split(platform)
    suffix = ".zip" if os_name == "windows" else ".tar.gz"
    middle = f"py{python}-" if python else ""
    return f"{binary}-{version}-{middle}{os_name}-{arch}{suffix}"


def _stem(name: str) -> str:
    return name.removesuffix(".zip").removesuffix(".tar.gz")


def find_license(root: Path) -> Path | None:
    """The project's license file at `root` (LICENSE, COPYING, ...), or None.

    The first of those names that is there must be a file a release may ship
    (`read_shipped_file`): a symlink out of the repository, a folder, a pipe or a
    device raises UsageError (exit 2) naming it, rather than being copied into the
    archives or left out of them without a word.
    """
    for name in LICENSE_NAMES:
        path = root / name
        if os.path.lexists(path):
            read_shipped_file(path, root)
            return path
    return None


def _cache_folder(os_name: str) -> str:
    if os_name == "windows":
        return r"%LOCALAPPDATA%\shipyard\zipapps"
    if os_name == "darwin":
        return "~/Library/Caches/shipyard/zipapps"
    return "$XDG_CACHE_HOME/shipyard/zipapps (default ~/.cache/shipyard/zipapps)"


def readme(binary: str, version: str, platform: str, python: str) -> str:
    """The README.txt of a release archive: what it is, what it needs, how to run it."""
    os_name, _ = _split(platform)
    if os_name == "windows":
        run = (
            f"Run {binary}.cmd (it starts {binary}.pyz with the py launcher:\n"
            f'py -{python} "{binary}.pyz"), or put this folder on PATH and type {binary}.'
        )
    else:
        run = f"Run ./{binary}, or copy it to a folder on PATH (it starts with python3)."
    return (
        f"{binary} {version} for {platform}\n"
        "\n"
        f"{binary} is a Python zipapp: it needs Python {python} and nothing else.\n"
        f"{run}\n"
        "\n"
        "The first start unpacks its code into a cache folder and runs it from there:\n"
        f"{_cache_folder(os_name)}\n"
        "Set SHIPYARD_ZIPAPP_ROOT to use another folder; deleting the folder is safe\n"
        "(the next start unpacks again).\n"
    )


def members(
    zipapp: Path, binary: str, version: str, platform: str, license_file: Path | None
) -> list[Member]:
    """What the release archive of `platform` holds (see the module's docstring).

    ShipyardError when `zipapp` is not a shipyard zipapp of `binary` for `platform`;
    UsageError when `license_file` is not a file a release may ship (`find_license`).
    """
    os_name, _ = _split(platform)
    info = zipapp_info(zipapp)
    platforms = info.get("platforms")
    if info.get("binary") != binary or not isinstance(platforms, list):
        raise ShipyardError(f"{zipapp} is not a zipapp of {binary}")
    if platform not in platforms:
        raise ShipyardError(
            f"{zipapp.name} is built for {', '.join(map(str, platforms))}, not {platform}; "
            f"use {binary}'s {platform} zipapp"
        )
    python = str(info.get("python", ""))
    data = zipapp.read_bytes()
    newline = "\r\n" if os_name == "windows" else "\n"
    text = readme(binary, version, platform, python).replace("\n", newline)
    found = [Member("README.txt", text.encode())]
    if os_name == "windows":
        found.append(Member(f"{binary}.pyz", data))
        found.append(Member(launcher_name(binary), launcher(f"{binary}.pyz", python)))
    else:
        found.append(Member(binary, data, 0o755))
    if license_file is not None:
        # Read under the rules of `find_license` again, as a file of its own folder: a
        # link swapped in since the check is refused, not followed.
        found.append(
            Member(license_file.name, read_shipped_file(license_file, license_file.parent))
        )
    names = [m.name for m in found]
    if len(set(names)) != len(names):
        raise ShipyardError(f"{binary}: the license file's name {names[-1]!r} is taken")
    return sorted(found, key=lambda m: m.name)


def _tar_gz(top: str, files: Sequence[Member], epoch: int) -> bytes:
    raw = io.BytesIO()

    def entry(name: str, mode: int, kind: bytes, size: int = 0) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.size, info.mtime = kind, mode, size, epoch
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    # No name and a fixed time in the gzip header; the OS byte is always 255 (unknown).
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=epoch, compresslevel=_LEVEL) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        tar.addfile(entry(top, 0o755, tarfile.DIRTYPE))
        for member in files:
            info = entry(f"{top}/{member.name}", member.mode, tarfile.REGTYPE, len(member.data))
            tar.addfile(info, io.BytesIO(member.data))
    return raw.getvalue()


def _zip(top: str, files: Sequence[Member], epoch: int) -> bytes:
    clock = time.gmtime(max(epoch, ZIP_EPOCH))
    stamp = (clock.tm_year, clock.tm_mon, clock.tm_mday, clock.tm_hour, clock.tm_min, clock.tm_sec)
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w") as archive:
        folder = zipfile.ZipInfo(f"{top}/", date_time=stamp)
        folder.create_system = 3
        folder.external_attr = (0o040755 << 16) | 0x10  # a folder, to unix and to DOS
        archive.writestr(folder, b"")
        for member in files:
            info = zipfile.ZipInfo(f"{top}/{member.name}", date_time=stamp)
            info.create_system = 3  # unix, so the mode bits are kept
            info.external_attr = (0o100000 | member.mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, member.data, compresslevel=_LEVEL)
    return raw.getvalue()


def write_release_archive(
    folder: Path,
    *,
    zipapp: Path,
    binary: str,
    version: str,
    platform: str,
    license_file: Path | None,
    epoch: int,
) -> Path:
    """Write the release archive of `binary`'s `zipapp` for `platform` into `folder`;
    its path (`archive_name`).

    The same inputs give the same bytes: `epoch` (the build's clock,
    SOURCE_DATE_EPOCH) is every entry's time. The archive appears whole or not at all
    (written under a temporary name, then renamed). ShipyardError when the zipapp is
    not `binary`'s for `platform` (a universal zipapp is for each of its platforms),
    UsageError when `license_file` may not be shipped (`find_license`).
    """
    # A zipapp built for one of several Pythons says which (build.json's
    # archive_python); its archives are named for it, so the Pythons' do not collide.
    python = zipapp_info(zipapp).get("archive_python")
    name = archive_name(binary, version, platform, str(python) if python else None)
    files = members(zipapp, binary, version, platform, license_file)
    top = _stem(name)
    data = _zip(top, files, epoch) if name.endswith(".zip") else _tar_gz(top, files, epoch)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    temp = folder / f"{TEMP_PREFIX}{name}.{os.getpid()}"
    try:
        temp.write_bytes(data)
        temp.chmod(0o644)
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return target
