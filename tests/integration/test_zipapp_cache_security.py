"""A second local user plants a zipapp cache; the zipapp, started as root, must not run it.

Regression test for issue 12, item 1: the bootstrap reused `<SHIPYARD_ZIPAPP_ROOT>/<build
id>/` (the unpacked site, cached bytecode) whoever owned it. The build id is public, so
`nobody` (via `runuser`) plants code where the archive will look, in a shared root under
/tmp; then root starts the archive. Planted code would create a marker file. Each attempt
must leave no marker and the genuine app must still run (from a private folder, with a
warning saying why the cache was not used).
"""

from __future__ import annotations

import marshal
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from importlib.util import MAGIC_NUMBER, source_hash
from pathlib import Path

import pytest

from shipyard.builders.zipapp import _boot as boot
from tests.integration.conftest import require_services
from tests.reliability import record
from tests.unit.builders.zipapp.boot.test_boot import build_id, make_pyz

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

AREA = "zipapp cache"
NOBODY = 65534
# More rounds of every attack in the reliability session.
TRIALS = int(os.environ.get("SHIPYARD_ZIPAPP_ATTACK_TRIALS", "1"))
GENUINE = "def main():\n    print('genuine', __file__)\n"
APPS: dict[str, dict[str, str | bytes]] = {
    # The site is unpacked into <root>/<id>/site: planted modules there would run.
    "native site": {"app/__init__.py": GENUINE, "app/_speedups.so": b"\x7fELF"},
    # Python caches bytecode in the site's __pycache__ folders: planted bytecode there
    # (unchecked hash-based, so never compared with the source) would run.
    "bytecode": {"app/__init__.py": GENUINE},
}


def _as_nobody(*command: str) -> None:
    done = subprocess.run(
        ["runuser", "-u", "nobody", "--", *command], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"{command}: {done.stderr}"


def _world_writable(root: Path) -> None:
    root.mkdir(mode=0o777)
    root.chmod(0o777)


def _sticky(root: Path) -> None:
    root.mkdir()
    root.chmod(0o1777)


def _made_by_the_other_user(root: Path) -> None:
    _as_nobody("mkdir", "-m", "755", str(root))


def _ours_but_group_writable(root: Path) -> None:
    root.mkdir()
    os.chown(root, 0, NOBODY)  # nobody's group may write it
    root.chmod(0o770)


# Root -> how it is set up before the other user plants; after, when given, by us.
SETUPS: dict[str, tuple[Callable[[Path], None], Callable[[Path], None] | None]] = {
    "world-writable root": (_world_writable, None),
    "sticky world-writable root": (_sticky, None),
    "root made by the other user": (_made_by_the_other_user, None),
    "our root, writable by a group the other user is in": (_ours_but_group_writable, None),
    # Planted while the root was open, then the root made private: the build folder
    # below is still the other user's.
    "our private root, planted build folder": (_world_writable, lambda root: root.chmod(0o700)),
}


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder under /tmp that `nobody` can reach, removed afterwards."""
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        message = "needs root and runuser to act as a second local user"
        if require_services():
            pytest.fail(message)
        pytest.skip(message)
    folder = Path(tempfile.mkdtemp(prefix="shipyard-zipapp-attack-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def _plant(pyz: Path, kind: str, root: Path, staging: Path, marker: Path) -> None:
    """As nobody, put code that writes `marker` where the archive looks for its site."""
    payload = f"open({str(marker)!r}, 'w').close()\ndef main():\n    print('planted')\n"
    home = root / build_id(pyz)
    app = staging / "app"
    app.mkdir(mode=0o755)
    if kind == "native site":
        (app / "__init__.py").write_text(payload)
        (app / "_speedups.so").write_bytes(b"\x7fELF")
    else:
        (app / "__init__.py").write_text(GENUINE)
        (app / "__pycache__").mkdir(mode=0o755)
        header = MAGIC_NUMBER + (1).to_bytes(4, "little") + source_hash(GENUINE.encode())
        code = marshal.dumps(compile(payload, "planted", "exec"))
        pyc = app / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc"
        pyc.write_bytes(header + code)
    for path in app.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    _as_nobody("mkdir", "-p", str(home / "site"))
    _as_nobody("cp", "-r", str(app), str(home / "site"))
    _as_nobody("chmod", "-R", "a+rX", str(home))


def test_a_cache_planted_by_another_user_never_runs(shared: Path, tmp_path: Path) -> None:
    pyzs = {
        kind: make_pyz(tmp_path, files, name=f"{kind.replace(' ', '-')}.pyz")
        for kind, files in APPS.items()
    }
    temp = tmp_path / "tmp"
    temp.mkdir()
    problems: list[str] = []
    attempts = ran = worked = 0
    for trial in range(TRIALS):
        for number, (name, (prepare, after)) in enumerate(SETUPS.items()):
            for kind, pyz in pyzs.items():
                case = shared / f"{trial}-{number}-{kind.replace(' ', '-')}"
                case.mkdir()
                case.chmod(0o1777)  # like /tmp: anyone may make the root first
                (case / "staging").mkdir(mode=0o755)
                root = case / "root"
                marker = tmp_path / f"ran-{case.name}"
                prepare(root)
                _plant(pyz, kind, root, case / "staging", marker)
                if after:
                    after(root)
                attempts += 1
                env = {**os.environ, boot.ROOT_ENV: str(root), "TMPDIR": str(temp)}
                done = subprocess.run(
                    [sys.executable, str(pyz)], env=env, capture_output=True, text=True, check=False
                )
                label = f"{name}, {kind}"
                if marker.exists() or done.stdout.startswith("planted"):
                    ran += 1
                    problems.append(f"{label}: the planted code ran")
                if done.returncode == 0 and done.stdout.startswith("genuine "):
                    worked += 1
                else:
                    problems.append(f"{label}: exit {done.returncode}: {done.stderr}")
                if "warning: not using the zipapp cache" not in done.stderr:
                    problems.append(f"{label}: no warning: {done.stderr!r}")
                if str(root) in done.stdout:
                    problems.append(f"{label}: ran from the shared root: {done.stdout}")
                if list(temp.iterdir()):
                    problems.append(f"{label}: private folders left: {list(temp.iterdir())}")
    record(
        "a second local user plants the zipapp cache; root runs the zipapp",
        area=AREA,
        cases=attempts,
        injected=(
            "as nobody (runuser), site modules and __pycache__ bytecode that write a "
            "marker, planted under <SHIPYARD_ZIPAPP_ROOT>/<build id>/site in shared roots under "
            f"/tmp ({len(SETUPS)} ways: world-writable, sticky, made by nobody, "
            "group-writable with nobody in the group, private root with nobody's build "
            "folder) for native and pure zipapps, then the zipapp started as root"
        ),
        result=(
            f"{attempts} attacks, {ran} planted code runs; {worked} of {attempts} starts "
            "ran the genuine app from a private folder, warning why"
        ),
        figures={"attempts": attempts, "successes": ran, "genuine runs": worked},
    )
    assert problems == [], "\n".join(problems)
    assert (attempts, ran, worked) == (len(SETUPS) * len(APPS) * TRIALS, 0, attempts)
