"""The Windows launcher shipped beside a Windows zipapp: Windows does not read shebang lines."""

from __future__ import annotations

from shipyard.errors import ShipyardError

__all__ = ["launcher", "launcher_name"]

# What a Windows launcher may name: a zipapp file name (binary names and PEP 440
# versions need no more), so nothing in it means anything to cmd.exe.
_LAUNCHABLE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-")


def launcher_name(binary: str) -> str:
    """The Windows launcher's file name: `<binary>.cmd`."""
    return f"{binary}.cmd"


def launcher(pyz: str, python: str) -> bytes:
    """The `<binary>.cmd` shipped beside a Windows zipapp named `pyz`: Windows does not
    read shebang lines, so this runs the archive next to it with the py launcher, on
    the Python it was built for (`py -3.11`), passing every argument and the exit status.

    CRLF line endings, as cmd.exe expects. ShipyardError for a name cmd.exe could
    read as more than a file name.
    """
    if not pyz.endswith(".pyz") or not set(pyz) <= _LAUNCHABLE or pyz.startswith("-"):
        raise ShipyardError(f"{pyz!r} is not a zipapp file name a launcher can name")
    if not python.replace(".", "").isdigit():
        raise ShipyardError(f"{python!r} is not a Python version such as 3.11")
    return f'@py -{python} "%~dp0{pyz}" %*\r\n'.encode("ascii")
