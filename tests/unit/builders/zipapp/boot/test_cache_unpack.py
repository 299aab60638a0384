"""Unpacking a zipapp's site: once per build, safe under a race, clear when it cannot."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.builders.zipapp import _boot as boot
from tests.unit.builders.zipapp.boot.test_boot import build_id, make_pyz, one_line, run

NATIVE_APP = """\
def main():
    print("file", __file__)
"""


@pytest.fixture
def native_pyz(tmp_path: Path) -> Path:
    """An archive whose package `app` holds a (fake) extension module, unpacked executable."""
    return make_pyz(tmp_path, {"app/__init__.py": NATIVE_APP, "app/_speedups.so": b"\x7fELF"})


def test_the_site_is_unpacked_once_into_the_build_folder(tmp_path: Path, native_pyz: Path) -> None:
    root = tmp_path / "cache"
    first = run(native_pyz, root)
    assert first.returncode == 0, first.stderr
    unpacked = root / build_id(native_pyz) / "site" / "app"
    assert first.stdout == f"file {unpacked / '__init__.py'}\n"
    assert (unpacked / "_speedups.so").read_bytes() == b"\x7fELF"
    assert (unpacked / "_speedups.so").stat().st_mode & 0o777 == 0o755
    stamp = (unpacked / "_speedups.so").stat().st_mtime_ns
    assert run(native_pyz, root).returncode == 0
    assert (unpacked / "_speedups.so").stat().st_mtime_ns == stamp  # not unpacked again
    assert sorted(p.name for p in (root / build_id(native_pyz)).iterdir()) == ["site", "use"]


RACER = """\
import os, sys, time
from shipyard.builders.zipapp import _boot as boot
archive, target, gate = sys.argv[1:]
real = os.rename
def rename(source, destination):
    # Both processes have a complete copy before either renames: one must lose.
    open(os.path.join(gate, str(os.getpid())), "w").close()
    deadline = time.monotonic() + 20
    while len(os.listdir(gate)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    real(source, destination)
os.rename = rename
print(boot.unpack(archive, target))
"""


def test_the_loser_of_the_unpack_race_uses_the_winners_copy(
    tmp_path: Path, native_pyz: Path
) -> None:
    target = tmp_path / "cache" / "build" / "site"
    gate = tmp_path / "gate"
    gate.mkdir()
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(native_pyz), str(target), str(gate)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [racer.communicate(timeout=60) for racer in racers]
    assert [r.returncode for r in racers] == [0, 0], outputs
    assert [out.strip() for out, _ in outputs] == [str(target)] * 2
    assert len(os.listdir(gate)) == 2  # both really raced to the rename
    assert sorted(p.name for p in target.parent.iterdir()) == ["site"]  # no temporaries left
    assert (target / "app" / "_speedups.so").read_bytes() == b"\x7fELF"


def test_processes_starting_at_once_all_run(tmp_path: Path, native_pyz: Path) -> None:
    env = {**os.environ, boot.ROOT_ENV: str(tmp_path / "cache")}
    starts = [
        subprocess.Popen(
            [sys.executable, str(native_pyz)], env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    outputs = {p.communicate(timeout=60)[0] for p in starts}
    assert [p.returncode for p in starts] == [0] * 4
    assert len(outputs) == 1 and "site" in outputs.pop()


def test_an_unusable_cache_folder_is_one_line_naming_it_and_the_variable(
    tmp_path: Path, native_pyz: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    line = one_line(run(native_pyz, blocker / "zipapps"))
    assert line.startswith(f"app: cannot unpack the zipapp into {blocker / 'zipapps'}")
    assert "set SHIPYARD_ZIPAPP_ROOT to a writable directory" in line


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temporary folder another user can read (pytest's own is private to its user)."""
    folder = Path(tempfile.mkdtemp(prefix="shipyard-boot-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def test_a_read_only_cache_folder_is_one_line_naming_it_and_the_variable(
    shared_tmp: Path,
) -> None:
    # root writes anywhere, so as root the archive runs as nobody, with a Python
    # nobody can reach (sys.executable may live in root's home).
    as_root = os.geteuid() == 0
    python = shutil.which("python3", path="/usr/bin:/usr/local/bin") if as_root else None
    python = python or sys.executable
    version = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    pyz = make_pyz(
        shared_tmp, {"app/__init__.py": NATIVE_APP, "app/_speedups.so": b"\x7fELF"}, python=version
    )
    pyz.chmod(0o755)
    root = shared_tmp / "read-only"
    root.mkdir(mode=0o555)
    root.chmod(0o555)
    line = one_line(run(pyz, root, python=python, user=65534 if as_root else None))
    assert line.startswith(f"app: cannot unpack the zipapp into {root} (")
    assert "Permission denied" in line
    assert line.endswith("set SHIPYARD_ZIPAPP_ROOT to a writable directory")
