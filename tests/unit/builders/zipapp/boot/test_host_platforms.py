"""Issue 15, item 1: a zipapp run as macOS and as Windows (darwin/windows, amd64/arm64).

The bootstrap's OS logic runs as darwin and windows here, the OS faked at its one seam,
`_boot.host._os()`, in a child process through the sys.platform it reads.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from shipyard.builders.zipapp import DEFAULT_SHEBANG, layout, write_archive
from shipyard.builders.zipapp import _boot as boot
from shipyard.builders.zipapp._boot.cache import USE
from tests.unit.builders.zipapp.boot.test_boot import HERE, build_id
from tests.unit.builders.zipapp.test_zipapp_platforms_os import SIX

# A child that runs an archive as another OS: sys.platform (what `_os` reads) faked
# after the modules the bootstrap uses are imported for real. For windows, msvcrt's
# byte locks are stood in for by flock (msvcrt exists only on Windows).
_AS = """
import atexit, fcntl, runpy, shutil, sys, tempfile, threading, types, zipfile
system, pyz = sys.argv[1], sys.argv[2]
if system == "windows":
    msvcrt = types.ModuleType("msvcrt")
    msvcrt.LK_LOCK, msvcrt.LK_NBLCK = 1, 2
    def locking(fd, mode, nbytes):
        fcntl.flock(fd, fcntl.LOCK_EX | (fcntl.LOCK_NB if mode == msvcrt.LK_NBLCK else 0))
    msvcrt.locking = locking
    sys.modules["msvcrt"] = msvcrt
sys.platform = {"windows": "win32"}.get(system, system)
sys.argv = [pyz, *sys.argv[3:]]
runpy.run_path(pyz, run_name="__main__")
"""

_PROGRAM = """\
import sys
def main():
    print("file", __file__)
    return 3
"""


def _run_as(system: str, pyz: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _AS, system, str(pyz)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def _pyz(tmp_path: Path, platform: str = "any") -> Path:
    """An archive of a small program, universal for the six platforms or for `platform`."""
    site = tmp_path / "site"
    (site / "app").mkdir(parents=True)
    (site / "app" / "__init__.py").write_text(_PROGRAM)
    info = {
        "binary": "app",
        "version": "1.0",
        "python": HERE,
        "platform": platform,
        "platforms": list(SIX) if platform == "any" else [platform],
        "entrypoint": "app:main",
    }
    target = tmp_path / "app.pyz"
    write_archive(target, DEFAULT_SHEBANG, layout(site, info), 0, compress=True)
    return target


def _clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (boot.ROOT_ENV, "XDG_CACHE_HOME")}
    env.update(HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    return env


def test_a_zipapp_runs_as_macos_from_library_caches(tmp_path: Path) -> None:
    pyz = _pyz(tmp_path)
    env = _clean_env(tmp_path)
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")  # Linux only: not read on macOS
    for _ in range(2):  # unpacks, then reuses
        done = _run_as("darwin", pyz, env)
        assert done.returncode == 3, done.stderr
        assert done.stderr == ""
    root = tmp_path / "home" / "Library" / "Caches" / "shipyard" / "zipapps"
    home = root / build_id(pyz)
    assert done.stdout == f"file {home / 'site' / 'app' / '__init__.py'}\n"
    assert (home / USE).read_text() == "app"
    # POSIX rules hold on macOS: the folders the bootstrap made are private.
    assert all(f.stat().st_mode & 0o777 == 0o700 for f in (root, home, home / "site"))
    assert not (tmp_path / "xdg").exists()


def test_a_zipapp_runs_as_windows_from_local_app_data(tmp_path: Path) -> None:
    pyz = _pyz(tmp_path)
    env = _clean_env(tmp_path)
    local = tmp_path / "AppData" / "Local"
    env["LOCALAPPDATA"] = str(local)
    root = local / "shipyard" / "zipapps"
    root.mkdir(parents=True)
    root.chmod(0o777)  # no POSIX modes on Windows: not judged, not refused
    for _ in range(2):
        done = _run_as("windows", pyz, env)
        assert done.returncode == 3, done.stderr
        assert done.stderr == ""
    home = root / build_id(pyz)
    assert done.stdout == f"file {home / 'site' / 'app' / '__init__.py'}\n"
    # The unpack's lock file (beside its temporary folder) is gone with the folder.
    assert sorted(p.name for p in home.iterdir()) == sorted([USE, "site"])


def test_the_wrong_windows_machine_is_refused_naming_the_archive(tmp_path: Path) -> None:
    pyz = _pyz(tmp_path, "windows/arm64")
    env = _clean_env(tmp_path)
    env["LOCALAPPDATA"] = str(tmp_path / "local")
    done = _run_as("windows", pyz, env)  # this interpreter's sys.version names no ARM64
    assert done.returncode == 2
    assert done.stderr == (
        "app: built for windows/arm64, but this machine is windows/x86; "
        "use app-1.0-windows_x86.pyz\n"
    )
