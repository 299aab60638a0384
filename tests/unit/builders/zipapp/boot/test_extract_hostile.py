"""Hostile entries in a zipapp, unpacked at run time by its bootstrap.

Archives with `../`, `//` and `./` names, symlink entries and odd modes must be
refused (nothing left behind) or unpacked as plain files inside
the target; a damaged archive run end to end exits 2 with one line.
"""

from __future__ import annotations

import stat
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import pytest

from shipyard.builders.zipapp import _boot as boot
from tests.reliability import record
from tests.unit._hostile import PAYLOAD, payload_files, write_zip
from tests.unit.builders.zipapp.boot.test_boot import make_pyz, run
from tests.unit.files.test_sources_hostile import snapshot, within

ZipEntry = tuple[str, bytes, int]
ZIP_CASES: dict[str, list[ZipEntry]] = {
    # name: entries added to a pyz (the whole site is unpacked)
    "../../../ below a top": [("site/app/../../../evil", PAYLOAD, 0o100644)],
    "../ below a folder": [("site/app/x/../../../../evil", PAYLOAD, 0o100644)],
    "empty part (//)": [("site/app//evil", PAYLOAD, 0o100644)],
    "dot part": [("site/app/./evil", PAYLOAD, 0o100644)],
    "'..' at the top": [("site/../evil", PAYLOAD, 0o100644)],
    "'../..' at the top": [("site/../../evil", PAYLOAD, 0o100644)],
    "symlink entry": [("site/app/link", b"/etc/passwd", 0o120777)],
    "symlink folder, then a file through it": [
        ("site/app/out", b"/tmp", 0o120777),
        ("site/app/out/evil", PAYLOAD, 0o100644),
    ],
    "setuid": [("site/app/suid", b"x", 0o104755)],
    "setgid": [("site/app/sgid", b"x", 0o102755)],
    "world-writable": [("site/app/ww", b"x", 0o100666)],
    "fifo mode": [("site/app/pipe", b"", 0o010644)],
    "device mode": [("site/app/dev", b"", 0o020644)],
    "duplicate name": [("site/app/__init__.py", b"raise SystemExit(7)\n", 0o100644)],
}
NATIVE_APP = "def main():\n    print('ok')\n"


def _add_entries(pyz: Path, entries: Sequence[ZipEntry]) -> None:
    write_zip(pyz, "a", entries)


def _check_unpacked(target: Path, problems: list[str], case: str) -> None:
    for path in target.rglob("*") if target.exists() else []:
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            problems.append(f"{case}: {path} is a symlink")
        elif stat.S_ISREG(mode) and stat.S_IMODE(mode) not in (0o644, 0o755):
            problems.append(f"{case}: {path} has mode {mode:o}")
        elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            problems.append(f"{case}: {path} is neither a file nor a folder")


@pytest.mark.reliability
def test_zipapp_unpacking_refuses_or_neutralises_hostile_entries(tmp_path: Path) -> None:
    problems: list[str] = []
    refused = neutralised = 0
    for number, (name, entries) in enumerate(ZIP_CASES.items()):
        case = tmp_path / str(number)
        # Deep enough that every ../ above still lands inside `case`, where it is seen.
        work = case / "a" / "b" / "c"
        work.mkdir(parents=True)
        outside = case / "outside"
        outside.mkdir()
        pyz = make_pyz(work, {"app/__init__.py": NATIVE_APP, "app/_s.so": b"\x7fELF"})
        _add_entries(pyz, entries)
        target = work / "cache" / "build" / "site"
        got = within(30, partial(boot.unpack, str(pyz), str(target)))
        if isinstance(got, boot.BootError):
            refused += 1
            if "the archive is damaged" not in str(got):
                problems.append(f"{name}: unexpected refusal: {got}")
            if target.exists():
                problems.append(f"{name}: refused, yet {target} exists")
        elif isinstance(got, BaseException):
            problems.append(f"{name}: {got!r}")
        else:
            neutralised += 1
            _check_unpacked(target, problems, name)
        if snapshot(outside):
            problems.append(f"{name}: the sentinel folder changed")
        stray = [p for p in payload_files(case) if not p.is_relative_to(target)]
        if stray:
            problems.append(f"{name}: the payload was written outside: {stray}")
        leftovers = (
            sorted(p.name for p in target.parent.iterdir()) if target.parent.exists() else []
        )
        if leftovers not in ([], ["site"]):
            problems.append(f"{name}: temporaries left: {leftovers}")
    # The whole bootstrap: one line and exit 2, not a traceback, for a damaged archive.
    pyz = make_pyz(tmp_path / "run", {"app/__init__.py": NATIVE_APP, "app/_s.so": b"\x7fELF"})
    _add_entries(pyz, [("site/app/../../../../evil", PAYLOAD, 0o100644)])
    done = run(pyz, tmp_path / "run" / "cache")
    lines = done.stderr.strip().splitlines()
    if done.returncode != 2 or len(lines) != 1 or "unsafe name" not in done.stderr:
        problems.append(f"running a damaged archive: exit {done.returncode}: {done.stderr}")
    if payload_files(tmp_path / "run"):
        problems.append("running a damaged archive wrote the payload")
    cases = len(ZIP_CASES) + 1
    record(
        "hostile entries in a zipapp unpacked at run time",
        area="archives",
        cases=cases,
        injected=f"{len(ZIP_CASES)} archives with ../, // and ./ names, '..' at the top, "
        "symlink entries and files through them, setuid/setgid/world-writable/fifo/device "
        "modes, a duplicate name; and one damaged archive run end to end",
        result=f"{refused} refused (nothing left behind), {neutralised} unpacked as plain "
        "0644/0755 files inside the target; the damaged archive exits 2 with one line; "
        "nothing written outside the target",
        figures={"cases": cases, "refused": refused, "neutralised": neutralised},
    )
    assert not problems, "\n".join(problems)
