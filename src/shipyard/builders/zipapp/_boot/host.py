"""The machine the zipapp runs on, in the manifest's terms, and whether it was built for it.

Linux, macOS and Windows: the OS is asked in one place, `_os()`, which tests replace
to run the macOS and Windows logic anywhere. Windows has no POSIX owners, modes or
flock (`is_posix`), and names its machine by the interpreter's build.
"""

from __future__ import annotations

import os
import sys

# Not `typing.TYPE_CHECKING`: importing typing (or json, which imports re) costs more
# than the rest of the bootstrap on a Python that has not loaded them yet.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = [
    "BINARY",
    "CLOEXEC",
    "MACHINES",
    "NOFOLLOW",
    "BootError",
    "check_target",
    "is_posix",
    "machine",
    "system",
    "user_id",
]

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
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOINHERIT", 0)
BINARY = getattr(os, "O_BINARY", 0)


def _os() -> str:
    """This machine's OS as the manifest names it: linux, darwin or windows (others as
    sys.platform says). The one place the bootstrap asks: tests replace it."""
    return {"win32": "windows", "cygwin": "windows"}.get(sys.platform, sys.platform)


def system() -> str:
    """This machine's OS in manifest terms (see `_os`)."""
    return _os()


def is_posix() -> bool:
    """Whether files have POSIX owners, modes and flock (every OS but Windows)."""
    return _os() != "windows"


def machine() -> str:
    """This interpreter's machine: os.uname()'s name for it, or on Windows the one its
    build names in sys.version (AMD64, ARM64), which an emulated x64 Python on an ARM
    laptop reports as amd64, as its wheels must be."""
    if _os() == "windows":
        return next((n.lower() for n in ("ARM64", "AMD64") if n in sys.version), "x86")
    return os.uname().machine if hasattr(os, "uname") else "unknown"


def user_id() -> int | None:
    """This user's id, or None where files have no POSIX owner (Windows)."""
    return os.geteuid() if is_posix() and hasattr(os, "geteuid") else None


class BootError(Exception):
    """Why the zipapp cannot start on this machine; shown as one line, exit status 2."""


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
