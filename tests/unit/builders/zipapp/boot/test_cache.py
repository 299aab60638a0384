"""The site is unpacked once per build and runs as from a venv.

What a virtualenv gives a program and these tests hold the bootstrap to: modules are files
on disk (data next to `__file__`, importlib.resources, importlib.metadata and entry
points see plain folders), .pth files are processed, the standard library comes before
the site and the interpreter's own site-packages are not on sys.path. Then the cache:
unpacked once, every start holding its build, old builds of a binary pruned.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from shipyard.builders.zipapp import _boot as boot
from shipyard.builders.zipapp._boot.cache import REMOVE_PREFIX
from tests.unit.builders.zipapp.boot.test_boot import build_id, make_pyz, run

VENV_LIKE = """\
import importlib.metadata, importlib.resources, os, sys
import colorsys, extra_module
def main():
    here = os.path.dirname(__file__)
    print("file", __file__)
    with open(os.path.join(here, "data", "default.yaml")) as handle:  # as yamllint does
        print("beside", handle.read().strip())
    data = importlib.resources.files("app").joinpath("data/default.yaml")
    print("resources", data.read_text().strip())
    print("version", importlib.metadata.version("app"))
    scripts = importlib.metadata.entry_points(group="console_scripts")
    print("entry", sorted(e.value for e in scripts if e.name == "app"))
    print("stdlib", colorsys.__file__.startswith(os.path.dirname(os.__file__)))
    print("pth", os.environ.get("PTH_RAN"), extra_module.WHERE)
    print("path", sys.path)
"""
VENV_FILES: dict[str, str | bytes] = {
    "app/__init__.py": VENV_LIKE,
    "app/data/default.yaml": "rules: {}\n",
    "app-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: app\nVersion: 1.0\n",
    "app-1.0.dist-info/entry_points.txt": "[console_scripts]\napp = app:main\n",
    # A package folder without metadata, as setuptools' vendored parts are in some sites.
    "setuptools/__init__.py": "",
    # A site module named like a stdlib one: in a venv the standard library wins.
    "colorsys.py": "raise SystemExit('the site shadowed the standard library')\n",
    # A .pth file: one line runs, one adds a folder to sys.path.
    "extra.pth": "import os; os.environ['PTH_RAN'] = 'yes'\nvendored\n",
    "vendored/extra_module.py": "WHERE = 'vendored'\n",
}


def lines(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """The app's output lines by their first word."""
    assert done.returncode == 0, done.stderr
    return dict(line.split(" ", 1) for line in done.stdout.splitlines())


def test_the_program_runs_from_files_on_disk_as_in_a_virtualenv(tmp_path: Path) -> None:
    pyz = make_pyz(tmp_path, VENV_FILES)
    root = tmp_path / "cache"
    shown = lines(run(pyz, root))
    site = root / build_id(pyz) / "site"
    assert shown["file"] == str(site / "app" / "__init__.py")
    assert shown["beside"] == shown["resources"] == "rules: {}"
    assert (shown["version"], shown["entry"]) == ("1.0", "['app:main']")
    assert shown["stdlib"] == "True"
    assert shown["pth"] == "yes vendored"
    path = ast.literal_eval(shown["path"])
    assert str(pyz) not in path  # the archive itself is not importable
    stdlib = os.path.dirname(os.__file__)
    assert path.index(stdlib) < path.index(str(site)) < path.index(str(site / "vendored"))


def test_the_interpreters_own_site_packages_are_left_out(tmp_path: Path) -> None:
    # The tests run in a venv whose site-packages holds pytest: a zipapp run with this
    # interpreter must not see it, as a fresh venv would not.
    probe = "import importlib.util, site, sys\ndef main():\n"
    probe += "    print('pytest', importlib.util.find_spec('pytest') is not None)\n"
    probe += "    print('theirs', any(p in sys.path for p in site.getsitepackages()))\n"
    pyz = make_pyz(tmp_path, {"app/__init__.py": probe})
    assert lines(run(pyz, tmp_path / "cache")) == {"pytest": "False", "theirs": "False"}


def test_a_build_is_unpacked_once_and_each_start_marks_its_use(tmp_path: Path) -> None:
    pyz = make_pyz(tmp_path, {"app/__init__.py": "def main():\n    return 0\n"})
    root = tmp_path / "cache"
    assert run(pyz, root).returncode == 0
    home = root / build_id(pyz)
    module = home / "site" / "app" / "__init__.py"
    written = module.stat().st_mtime_ns
    assert sorted(p.name for p in home.iterdir()) == ["site", "use"]
    assert (home / "use").read_text() == "app"  # the binary whose build this is
    assert (home / "use").stat().st_mode & 0o777 == 0o600
    assert (home / "site").stat().st_mode & 0o777 == 0o700
    os.utime(home / "use", (1_000_000_000, 1_000_000_000))
    assert run(pyz, root).returncode == 0
    assert module.stat().st_mtime_ns == written  # not unpacked again
    assert (home / "use").stat().st_mtime > time.time() - 60  # this start was recorded


def test_python_caches_bytecode_beside_the_unpacked_modules(tmp_path: Path) -> None:
    pyz = make_pyz(tmp_path, {"app/__init__.py": "def main():\n    return 0\n"})
    root = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env[boot.ROOT_ENV] = str(root)
    subprocess.run([sys.executable, str(pyz)], env=env, check=True)
    cached = root / build_id(pyz) / "site" / "app" / "__pycache__"
    assert [p.name for p in cached.iterdir()] == [f"__init__.{sys.implementation.cache_tag}.pyc"]


def test_shipped_bytecode_lands_in_pycache_and_is_what_runs(tmp_path: Path) -> None:
    source = {"app/__init__.py": "def main():\n    print('source')\n"}
    pyz = make_pyz(tmp_path, source, compile_pyc=True)
    pyc = f"site/app/__pycache__/__init__.{sys.implementation.cache_tag}.pyc"
    with zipfile.ZipFile(pyz) as archive:
        shipped = archive.read(pyc)
    # Unchecked hash-based bytecode: Python trusts it without reading the source again,
    # so the source changed after unpacking shows which one ran.
    root = tmp_path / "cache"
    assert run(pyz, root).stdout == "source\n"
    site = root / build_id(pyz) / "site"
    assert (site / pyc.removeprefix("site/")).read_bytes() == shipped
    (site / "app" / "__init__.py").write_text("def main():\n    print('edited')\n")
    assert run(pyz, root).stdout == "source\n"


def test_many_files_are_unpacked_whole_by_several_threads(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {
        f"app/m{n:03}.py": f"VALUE = {n}\n" + "# padding\n" * n for n in range(300)
    }
    files["app/__init__.py"] = (
        "import importlib\ndef main():\n"
        "    print(sum(importlib.import_module(f'app.m{n:03}').VALUE for n in range(300)))\n"
    )
    pyz = make_pyz(tmp_path, files)
    done = run(pyz, tmp_path / "cache")
    assert (done.returncode, done.stdout) == (0, f"{sum(range(300))}\n"), done.stderr
    site = tmp_path / "cache" / build_id(pyz) / "site"
    for rel, text in files.items():
        assert (site / rel).read_text() == text
        assert (site / rel).stat().st_mode & 0o777 == 0o644


def test_an_archive_holding_a_name_twice_is_refused_as_damaged(tmp_path: Path) -> None:
    pyz = make_pyz(tmp_path, {"app/__init__.py": "def main():\n    return 0\n"})
    with zipfile.ZipFile(pyz, "a") as archive, pytest.warns(UserWarning, match="Duplicate"):
        archive.writestr("site/app/__init__.py", "def main():\n    return 9\n")
    done = run(pyz, tmp_path / "cache")
    assert done.returncode == 2
    assert done.stderr.startswith("app: the archive is damaged: ")
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "cache" / build_id(pyz) / "site").exists()  # nothing published


# Pruning: old builds of a binary go, running ones and other binaries' stay.


def _builds(tmp_path: Path, count: int) -> list[Path]:
    """`count` archives of one binary, each a different build (so a different id)."""
    archives = []
    for n in range(count):
        folder = tmp_path / f"b{n}"
        folder.mkdir()
        app = f"import sys\nBUILD = {n}\ndef main():\n    sys.stdin.read()\n"
        archives.append(make_pyz(folder, {"app/__init__.py": app}))
    return archives


def _start(pyz: Path, root: Path, env: dict[str, str] | None = None) -> None:
    subprocess.run(
        [sys.executable, str(pyz)],
        env={**os.environ, boot.ROOT_ENV: str(root), **(env or {})},
        input="",
        check=True,
        text=True,
    )


def test_old_builds_of_a_binary_are_pruned_beyond_the_newest_three(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    builds = _builds(tmp_path, 5)
    (root / ("f" * 64)).mkdir(parents=True)  # another binary's build
    (root / ("f" * 64) / "use").write_text("other")
    os.utime(root / ("f" * 64) / "use", (1_000_000_000, 1_000_000_000))  # long unused
    for pyz in builds:
        _start(pyz, root)
    kept = sorted(p.name for p in root.iterdir())
    assert kept == sorted([build_id(p) for p in builds[2:]] + ["f" * 64])
    # A warm start makes an old build the newest used: the next new build prunes another.
    _start(builds[2], root)
    _start(builds[0], root)  # unpacked again, as the oldest was pruned
    assert {build_id(builds[0]), build_id(builds[2])} <= {p.name for p in root.iterdir()}
    assert build_id(builds[3]) not in {p.name for p in root.iterdir()}


def test_the_number_kept_is_set_by_the_variable(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    builds = _builds(tmp_path, 3)
    for pyz in builds:
        _start(pyz, root, {boot.KEEP_ENV: "1"})
    assert [p.name for p in root.iterdir()] == [build_id(builds[-1])]


def test_a_running_build_is_never_pruned(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    first, *rest = _builds(tmp_path, 4)
    running = subprocess.Popen(
        [sys.executable, str(first)],
        env={**os.environ, boot.ROOT_ENV: str(root)},
        stdin=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (root / build_id(first) / "site").is_dir() and time.monotonic() < deadline:
            time.sleep(0.05)
        for pyz in rest:
            _start(pyz, root, {boot.KEEP_ENV: "1"})
        names = {p.name for p in root.iterdir()}
        assert build_id(first) in names  # held by the running start
        assert names == {build_id(first), build_id(rest[-1])}
    finally:
        running.communicate("", timeout=30)
    assert running.returncode == 0


def test_prune_finishes_a_removal_a_crash_interrupted(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    leftover = root / f"{REMOVE_PREFIX}0123456789abcdef-00000000"
    (leftover / "site").mkdir(parents=True)
    assert boot.prune(str(root), "app", 3) == []
    assert not leftover.exists()


def test_prune_keeps_other_users_and_foreign_folders(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    for name, owner in (("a" * 64, "app"), ("b" * 64, "app"), ("not-a-build", "app")):
        (root / name).mkdir(parents=True)
        (root / name / "use").write_text(owner)
    os.utime(root / ("a" * 64) / "use", (1_000_000_000, 1_000_000_000))
    assert boot.prune(str(root), "app", 1) == ["b" * 64, "a" * 64]  # newest first
    assert [p.name for p in root.iterdir()] == ["not-a-build"]


# When the cache cannot be used, the site runs from a private temporary folder.


def test_an_untrusted_root_runs_the_genuine_program_from_a_private_folder(
    tmp_path: Path,
) -> None:
    pyz = make_pyz(tmp_path, {"app/__init__.py": "def main():\n    print('file', __file__)\n"})
    root = tmp_path / "shared"
    planted = root / build_id(pyz) / "site" / "app"
    planted.mkdir(parents=True)
    marker = tmp_path / "pwned"
    (planted / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef main(): pass\n")
    root.chmod(0o777)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = subprocess.run(
        [sys.executable, str(pyz)],
        env={**os.environ, boot.ROOT_ENV: str(root), "TMPDIR": str(tmp)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    assert "is writable by group and others (mode 777)" in done.stderr
    assert re.fullmatch(rf"file {tmp}/shipyard-zipapp-[^/]+/site/app/__init__.py\n", done.stdout)
    assert list(tmp.iterdir()) == []  # removed at exit
