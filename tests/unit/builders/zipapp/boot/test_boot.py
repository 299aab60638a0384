"""The zipapp bootstrap: how it starts, runs the unpacked site, and refuses a wrong target."""

from __future__ import annotations

import marshal
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from importlib.util import MAGIC_NUMBER
from pathlib import Path

import pytest

from shipyard.builders.zipapp import DEFAULT_SHEBANG, Entry, layout, write_archive
from shipyard.builders.zipapp import _boot as boot
from shipyard.builders.zipapp._boot.host import MACHINES
from shipyard.builders.zipapp._boot.layout import BOOT_DATA, CODE, PARTS, SOURCE

HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"
MACHINE = os.uname().machine
ARCH = next((arch for arch, names in MACHINES.items() if MACHINE in names), MACHINE)
OTHER = "arm64" if ARCH == "amd64" else "amd64"

APP = """\
import sys
def main():
    print("file", __file__)
    print("argv", sys.argv[1:])
    return 3
"""


def make_pyz(
    folder: Path,
    files: Mapping[str, str | bytes],
    *,
    python: str = HERE,
    platform: str = "any",
    compile_pyc: bool = False,
    name: str = "app.pyz",
) -> Path:
    """An archive of a site made of `files`, laid out and written as the builder does."""
    site = folder / f"{name}-site"
    for rel, text in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode() if isinstance(text, str) else text)
    info = {
        "binary": "app",
        "version": "1.0",
        "revision": None,
        "dirty": False,
        "created": "2023-11-14T22:13:20Z",
        "python": python,
        "platform": platform,
        "platforms": ["linux/amd64", "linux/arm64"] if platform == "any" else [platform],
        "entrypoint": "app:main",
    }
    target = folder / name
    write_archive(
        target,
        DEFAULT_SHEBANG,
        layout(site, info, compile_pyc=compile_pyc),
        0,
        compress=True,
    )
    return target


def run(
    pyz: Path, root: Path, *args: str, python: str = sys.executable, user: int | None = None
) -> subprocess.CompletedProcess[str]:
    """Run an archive with `root` as its cache folder (as `user` when given)."""
    env = {**os.environ, boot.ROOT_ENV: str(root)}
    return subprocess.run(
        [python, str(pyz), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        user=user,
        group=user,
    )


def build_id(pyz: Path) -> str:
    """The build id the archive's bootstrap keys its cache folder with."""
    with zipfile.ZipFile(pyz) as archive:
        return str(marshal.loads(archive.read(BOOT_DATA))["build_id"])


@pytest.mark.parametrize("precompiled", [True, False])
def test_the_bootstrap_runs_precompiled_code_when_it_fits_else_its_source(
    tmp_path: Path, precompiled: bool
) -> None:
    pyz = make_pyz(tmp_path, {"app/__init__.py": APP})
    code = CODE % MAGIC_NUMBER.hex()
    sources = {SOURCE % part for part in PARTS}
    with zipfile.ZipFile(pyz) as archive:
        entries = [Entry(i.filename, archive.read(i)) for i in archive.infolist() if not i.is_dir()]
    assert code in {e.name for e in entries}  # built by the Python that runs it
    if precompiled:  # broken sources prove the precompiled code of every module ran
        entries = [
            Entry(e.name, b"raise SystemExit(9)") if e.name in sources else e for e in entries
        ]
    else:  # as when the archive was built for another Python
        entries = [e for e in entries if e.name != code]
    write_archive(pyz, DEFAULT_SHEBANG, entries, 0, compress=True)
    assert run(pyz, tmp_path / "cache").returncode == 3


def test_the_app_runs_from_its_unpacked_site_and_exits_with_the_entrypoint_result(
    tmp_path: Path,
) -> None:
    pyz = make_pyz(tmp_path, {"app/__init__.py": APP})
    done = run(pyz, tmp_path / "cache", "a", "--b")
    assert done.returncode == 3, done.stderr
    site = tmp_path / "cache" / build_id(pyz) / "site"
    assert f"file {site / 'app' / '__init__.py'}" in done.stdout
    assert "argv ['a', '--b']" in done.stdout
    assert done.stderr == ""


def test_metadata_resources_and_namespace_packages_work_from_the_unpacked_site(
    tmp_path: Path,
) -> None:
    app = """\
import importlib.metadata, importlib.resources, pkgutil
import ns.inner
def main():
    print(importlib.metadata.version("app"), importlib.metadata.version("Other_Dist"))
    print(importlib.resources.files("app").joinpath("data.txt").read_text().strip())
    print(pkgutil.get_data("app", "data.txt").decode().strip(), ns.inner.VALUE)
"""
    pyz = make_pyz(
        tmp_path,
        {
            "app/__init__.py": app,
            "app/data.txt": "payload\n",
            "app-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: app\nVersion: 1.0\n",
            "other_dist-2.5.dist-info/METADATA": "Name: other-dist\nVersion: 2.5\n",
            "ns/inner/__init__.py": "VALUE = 'namespace'\n",  # ns has no __init__.py
        },
    )
    done = run(pyz, tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["1.0 2.5", "payload", "payload namespace"]


def test_a_moved_archive_runs_from_its_builds_unpacked_site(tmp_path: Path) -> None:
    app = "import traceback\ndef main():\n    try:\n        raise KeyError('boom')\n"
    app += "    except KeyError:\n        traceback.print_exc()\n"
    pyz = make_pyz(tmp_path, {"app/__init__.py": app})
    root = tmp_path / "cache"
    assert run(pyz, root).returncode == 0  # unpacks
    module = root / build_id(pyz) / "site" / "app" / "__init__.py"
    unpacked = module.stat().st_mtime_ns
    moved = tmp_path / "elsewhere" / "moved.pyz"
    moved.parent.mkdir()
    shutil.copy(pyz, moved)
    done = run(moved, root)
    assert f'File "{module}", line 4' in done.stderr
    assert "raise KeyError('boom')" in done.stderr  # the source, on disk
    assert module.stat().st_mtime_ns == unpacked  # the same build: not unpacked again
    assert [p.name for p in root.iterdir()] == [build_id(pyz)]


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_the_wrong_python_is_refused_with_one_line_and_exit_2(tmp_path: Path) -> None:
    pyz = make_pyz(tmp_path, {"app/__init__.py": APP}, python="3.99")
    line = one_line(run(pyz, tmp_path / "cache"))
    assert line.startswith(f"app: built for Python 3.99, but this is Python {HERE} (")
    assert line.endswith("run it with python3.99")


def test_the_wrong_machine_is_refused_naming_the_archive_to_use(tmp_path: Path) -> None:
    pyz = make_pyz(tmp_path, {"app/__init__.py": APP}, platform=f"linux/{OTHER}")
    line = one_line(run(pyz, tmp_path / "cache"))
    assert line == (
        f"app: built for linux/{OTHER}, but this machine is linux/{ARCH}; "
        f"use app-1.0-linux_{ARCH}.pyz"
    )
