"""The zipapp cache runs code, so it is used only when no one else could have written it.

Regression tests for issue 12, item 1: the bootstrap reused `<root>/<build id>/` (site
folder and bytecode) whoever owned it. Here as one user; tests/integration/
test_zipapp_cache_security.py plants the cache as a second user. The bytecode that runs
is Python's own, in the __pycache__ folders of the unpacked site, so it is as safe as
the site folder is.
"""

from __future__ import annotations

import marshal
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from importlib.util import MAGIC_NUMBER, source_hash
from pathlib import Path

import pytest

from shipyard.builders.zipapp import _boot as boot
from shipyard.builders.zipapp._boot.cache import PRIVATE_PREFIX, UNPACK_PREFIX
from tests.unit.builders.zipapp.boot.test_boot import APP, build_id, make_pyz, run

AS_ROOT = os.geteuid() == 0
NOBODY = 65534
only_root = pytest.mark.skipif(not AS_ROOT, reason="chown to another user needs root")
NATIVE_APP = "def main():\n    print('file', __file__)\n"
# Makes a start's temporary folder in (parent, prefix); True: that start is then killed.
MakeLeftover = Callable[[Path, str, bool], Path]


def planted(marker: Path) -> str:
    """Module source that proves it ran by writing `marker`."""
    return f"open({str(marker)!r}, 'w').close()\ndef main():\n    print('planted')\n"


@pytest.fixture
def native_pyz(tmp_path: Path) -> Path:
    """An archive whose package `app` holds a (fake) extension module."""
    return make_pyz(
        tmp_path, {"app/__init__.py": NATIVE_APP, "app/_speedups.so": b"\x7fELF"}, name="n.pyz"
    )


@pytest.fixture
def pure_pyz(tmp_path: Path) -> Path:
    """An archive of pure Python: Python caches its bytecode in the unpacked site."""
    return make_pyz(tmp_path, {"app/__init__.py": APP}, name="p.pyz")


def run_with_tmp(pyz: Path, root: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    """Run an archive with `root` as its cache root and `tmp` as its temporary folder."""
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, boot.ROOT_ENV: str(root), "TMPDIR": str(tmp)}
    return subprocess.run(
        [sys.executable, str(pyz)], env=env, capture_output=True, text=True, check=False
    )


# The trust rule, folder by folder.


# The bootstrap: planted caches do not run, the app still does.


def plant_bytecode(site: Path, marker: Path) -> Path:
    """The genuine source of `app` with bytecode beside it that writes `marker`: unchecked
    hash-based (PEP 552), so Python runs it without comparing it with the source."""
    (site / "app" / "__pycache__").mkdir(parents=True)
    (site / "app" / "__init__.py").write_text(APP)
    code = compile(planted(marker), str(site / "app" / "__init__.py"), "exec")
    header = MAGIC_NUMBER + (1).to_bytes(4, "little") + source_hash(APP.encode())
    pyc = site / "app" / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc"
    pyc.write_bytes(header + marshal.dumps(code))
    return pyc


def test_planted_bytecode_in_a_root_others_can_write_does_not_run(
    tmp_path: Path, pure_pyz: Path
) -> None:
    # The control: in a root the bootstrap trusts, planted bytecode is what runs.
    trusted = tmp_path / "trusted"
    plant_bytecode(trusted / build_id(pure_pyz) / "site", tmp_path / "control")
    assert run(pure_pyz, trusted).stdout == "planted\n"
    assert (tmp_path / "control").exists()
    root = tmp_path / "shared"
    marker = tmp_path / "pwned"
    pyc = plant_bytecode(root / build_id(pure_pyz) / "site", marker)
    planted_bytes = pyc.read_bytes()
    root.chmod(0o777)
    tmp = tmp_path / "tmp"
    done = run_with_tmp(pure_pyz, root, tmp)
    assert done.returncode == 3, done.stderr  # the genuine app ran
    assert not marker.exists()
    assert done.stderr == (
        f"app: warning: not using the zipapp cache, {root} is writable by group and others "
        "(mode 777); running without it (make the folder yours and not writable by group or "
        "others, or set SHIPYARD_ZIPAPP_ROOT to one that is)\n"
    )
    assert re.match(rf"file {tmp}/shipyard-zipapp-[^/]+/site/app/__init__.py\n", done.stdout)
    assert pyc.read_bytes() == planted_bytes  # the cache was left alone
    assert sorted(p.name for p in pyc.parent.iterdir()) == [pyc.name]
    assert list(tmp.iterdir()) == []


def test_planted_native_code_in_a_root_others_can_write_does_not_run(
    tmp_path: Path, native_pyz: Path
) -> None:
    root = tmp_path / "shared"
    site = root / build_id(native_pyz) / "site"
    (site / "app").mkdir(parents=True)
    marker = tmp_path / "pwned"
    (site / "app" / "__init__.py").write_text(planted(marker))
    root.chmod(0o1777)
    tmp = tmp_path / "tmp"
    done = run_with_tmp(native_pyz, root, tmp)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    assert "is writable by group and others (mode 1777)" in done.stderr
    # Unpacked into a private temporary folder, removed at exit.
    assert re.fullmatch(rf"file {tmp}/shipyard-zipapp-[^/]+/site/app/__init__.py\n", done.stdout)
    assert list(tmp.iterdir()) == []


def test_the_bootstrap_makes_every_folder_it_creates_private(
    tmp_path: Path, native_pyz: Path, pure_pyz: Path
) -> None:
    root = tmp_path / "made" / "by" / "boot"
    # Python writes bytecode beside the unpacked modules (unless told not to).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env[boot.ROOT_ENV] = str(root)
    codes = [
        subprocess.run([sys.executable, str(pyz)], env=env, check=False).returncode
        for pyz in (pure_pyz, native_pyz)
    ]
    assert codes == [3, 0]  # APP's main returns 3
    for folder in (tmp_path / "made", tmp_path / "made" / "by", root):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    for pyz in (pure_pyz, native_pyz):
        home = root / build_id(pyz)
        assert home.stat().st_mode & 0o777 == 0o700
        assert (home / "site").stat().st_mode & 0o777 == 0o700  # no one else reaches in
        assert (home / "site" / "app").stat().st_mode & 0o022 == 0
        # The bytecode cache is inside that private folder.
        assert list((home / "site" / "app" / "__pycache__").glob("__init__.*.pyc"))


def test_untrusted_cache_still_reports_a_damaged_or_wrong_target_first(tmp_path: Path) -> None:
    pyz = make_pyz(tmp_path, {"app/__init__.py": APP}, python="3.99")
    root = tmp_path / "shared"
    root.mkdir(mode=0o777)
    root.chmod(0o777)
    done = run(pyz, root)
    assert done.returncode == 2 and "warning" not in done.stderr


# Temporary names, fsync, sweeping.


def test_temporary_names_are_unpredictable(
    tmp_path: Path, native_pyz: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renamed: list[str] = []
    real_rename, real_replace = os.rename, os.replace

    def rename(src: str, dst: str) -> None:
        renamed.append(os.path.basename(src))
        real_rename(src, dst)

    def replace(src: str, dst: str) -> None:
        renamed.append(os.path.basename(src))
        real_replace(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "replace", replace)
    for n in range(2):
        boot.unpack(str(native_pyz), str(tmp_path / "root" / str(n) / "site"))
    assert len(renamed) == len(set(renamed)) == 2
    assert all(re.fullmatch(r"\.unpack-[a-z0-9_]{8}", n) for n in renamed), renamed
    assert not any(str(os.getpid()) in n for n in renamed)


def test_unpacked_files_are_flushed_before_the_rename_that_publishes_them(
    tmp_path: Path, native_pyz: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, str]] = []
    real_fsync, real_rename, real_sync = os.fsync, os.rename, os.sync
    target = tmp_path / "root" / "id" / "site"

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def rename(src: str, dst: str) -> None:
        events.append(("rename", src))
        real_rename(src, dst)

    def sync() -> None:
        # Every file is written (whole) by the time of the flush.
        temp = next(target.parent.glob(UNPACK_PREFIX + "*"))
        sizes = {p.relative_to(temp).as_posix(): p.stat().st_size for p in temp.rglob("*.*")}
        events.append(("sync", repr(sorted(sizes.items()))))
        real_sync()

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "sync", sync)
    boot.unpack(str(native_pyz), str(target))
    written = [("app/__init__.py", len(NATIVE_APP)), ("app/_speedups.so", 4)]
    assert [kind for kind, _ in events] == ["sync", "rename", "fsync"]
    assert events[0][1] == repr(written)
    assert events[2] == ("fsync", str(target.parent))  # the rename, durable


KILLED = """\
import os, signal, sys
from shipyard.builders.zipapp._boot.folders import locked_temp
temp, fd = locked_temp(sys.argv[1], sys.argv[2])
open(os.path.join(temp, "half-written.so"), "w").close()
print(temp, flush=True)
if sys.argv[3] == "die":
    os.kill(os.getpid(), signal.SIGKILL)
sys.stdin.read()
"""


@pytest.fixture
def leftover() -> Iterator[MakeLeftover]:
    """Makes a temporary folder as a start does; `die` kills that start, else it lives on."""
    live: list[subprocess.Popen[str]] = []

    def make(parent: Path, prefix: str, die: bool) -> Path:
        parent.mkdir(parents=True, exist_ok=True)
        start = subprocess.Popen(
            [sys.executable, "-c", KILLED, str(parent), prefix, "die" if die else "live"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert start.stdout is not None
        path = Path(start.stdout.readline().strip())
        if die:
            start.wait(timeout=30)
        else:
            live.append(start)
        assert path.is_dir()
        return path

    yield make
    for start in live:
        start.communicate(timeout=30)


def test_a_killed_starts_unpack_folder_is_swept_and_a_live_ones_kept(
    native_pyz: Path, tmp_path: Path, leftover: MakeLeftover
) -> None:
    root = tmp_path / "root"
    build = root / build_id(native_pyz)
    dead = leftover(build, UNPACK_PREFIX, True)
    live = leftover(build, UNPACK_PREFIX, False)
    done = run(native_pyz, root)  # cold: unpacks, sweeping first
    assert done.returncode == 0, done.stderr
    assert not dead.exists() and live.is_dir()
    again = leftover(build, UNPACK_PREFIX, True)  # killed while another finished
    assert run(native_pyz, root).returncode == 0  # warm
    assert not again.exists() and live.is_dir()
    assert sorted(p.name for p in build.iterdir()) == sorted(["site", "use", live.name])


@only_root
def test_another_users_leftover_is_not_swept(
    native_pyz: Path, tmp_path: Path, leftover: MakeLeftover
) -> None:
    build = tmp_path / "root" / build_id(native_pyz)
    dead = leftover(build, UNPACK_PREFIX, True)
    os.chown(dead, NOBODY, NOBODY)
    assert run(native_pyz, tmp_path / "root").returncode == 0
    assert dead.is_dir()


def test_a_killed_starts_private_folder_is_swept_by_a_later_private_start(
    native_pyz: Path, tmp_path: Path, leftover: MakeLeftover
) -> None:
    tmp = tmp_path / "tmp"
    dead, live = leftover(tmp, PRIVATE_PREFIX, True), leftover(tmp, PRIVATE_PREFIX, False)
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o777)
    done = run_with_tmp(native_pyz, root, tmp)
    assert done.returncode == 0, done.stderr
    assert not dead.exists()
    assert sorted(tmp.iterdir()) == [live]  # the dead one swept, this start's own removed
