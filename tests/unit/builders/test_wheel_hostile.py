"""Hostile wheels: re-packed by the wheel builder, installed into image and zipapp sites.

Each wheel carries entries that escape (`../`, absolute paths, backslashes,
drive letters), links out followed by a write through them, setuid and setgid
bits, device modes and duplicates. Each must be refused with an error naming the
entry, or neutralised (a plain file, mode 0644 or 0755, inside the target); a
sentinel folder beside the target must stay untouched.
"""

from __future__ import annotations

import stat
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from shipyard.builders.image import ImageBuilder
from shipyard.builders.wheel import normalize_wheel
from shipyard.builders.zipapp import ZipappBuilder
from shipyard.engine.run import wrapped
from shipyard.errors import BuildError, ShipyardError
from shipyard.oci.layout import read_layout
from shipyard.oci.model import Platform
from tests.reliability import record
from tests.unit._hostile import (
    EPOCH,
    OUT,
    PAYLOAD,
    Case,
    WheelEntry,
    check_layer_tar,
    check_zip_modes,
    image_action,
    make_case,
    make_wheel,
    payload_files,
    wheel_artifact,
    zipapp_action,
    zipapp_options,
)
from tests.unit.builders.zipapp.boot.test_boot import run
from tests.unit.files.test_sources_hostile import snapshot

# name: (extra entries, also install with pip (slow: only a representative subset))
WHEELS: dict[str, tuple[list[WheelEntry], bool]] = {
    "../../evil": ([("../../evil", PAYLOAD, 0o100644)], True),
    "../ deep in a package": ([("evilpkg/../../../../evil", PAYLOAD, 0o100644)], False),
    "absolute path": ([(f"{OUT}/abs-evil", PAYLOAD, 0o100644)], False),
    "data scheme ../": ([("evilpkg-1.0.data/data/../../../evil", PAYLOAD, 0o100644)], False),
    "purelib scheme ../": (
        [("evilpkg-1.0.data/purelib/../../../../evil", PAYLOAD, 0o100644)],
        False,
    ),
    "scripts scheme ../": ([("evilpkg-1.0.data/scripts/../../../evil", PAYLOAD, 0o100755)], False),
    "backslash ..\\": ([("evilpkg\\..\\..\\..\\evil", PAYLOAD, 0o100644)], False),
    "drive letter": ([("C:/evil", PAYLOAD, 0o100644)], False),
    "symlink to /etc/passwd": ([("evilpkg/passwd", b"/etc/passwd", 0o120777)], False),
    "symlink folder out, then a file through it": (
        [("evilpkg/out", OUT.encode(), 0o120777), ("evilpkg/out/evil", PAYLOAD, 0o100644)],
        False,
    ),
    "relative symlink out, then a file through it": (
        [("evilpkg/up", b"../../../..", 0o120777), ("evilpkg/up/evil", PAYLOAD, 0o100644)],
        False,
    ),
    "setuid, setgid, sticky, world-writable": (
        [
            ("evilpkg/suid", b"#!/bin/sh\n", 0o104755),
            ("evilpkg/sgid", b"#!/bin/sh\n", 0o102755),
            ("evilpkg/sticky", b"x", 0o101777),
            ("evilpkg/ww", b"x", 0o100666),
        ],
        True,
    ),
    "fifo and device modes": (
        [("evilpkg/pipe", b"", 0o010644), ("evilpkg/null", b"", 0o020644)],
        False,
    ),
    "duplicate name": ([("evilpkg/__init__.py", b"def main():\n    return 9\n", 0o100644)], False),
}


@pytest.mark.reliability
def test_the_wheel_builder_repack_refuses_or_normalises_hostile_wheels(tmp_path: Path) -> None:
    problems: list[str] = []
    refused = normalised = 0
    for number, (name, (extra, _)) in enumerate(WHEELS.items()):
        case = tmp_path / str(number)
        outside = case / "outside"
        outside.mkdir(parents=True)
        source = make_wheel(case / "in" / "evilpkg-1.0-py3-none-any.whl", extra, outside)
        target = case / "out" / source.name
        target.parent.mkdir()
        try:
            normalize_wheel(source, target, EPOCH, {"version": "1.0"})
        except ShipyardError as exc:
            refused += 1
            entry = extra[0][0].replace(OUT, str(outside))
            if entry not in str(exc) and "twice" not in str(exc):
                problems.append(f"{name}: the error does not name the entry: {exc}")
        else:
            normalised += 1
            check_zip_modes(target, problems, name)
        if snapshot(outside) or sorted(p.name for p in case.iterdir()) != ["in", "out", "outside"]:
            problems.append(f"{name}: something was written outside the target")
    cases = len(WHEELS)
    record(
        "hostile wheels re-packed by the wheel builder",
        area="archives",
        cases=cases,
        injected=f"{cases} wheels with ../, absolute, backslash and drive-letter names, "
        "symlink entries (and files written through them), setuid/setgid/sticky/"
        "world-writable and fifo/device modes, duplicate names",
        result=f"{refused} refused naming the entry, {normalised} normalised to plain "
        "0644/0755 files; nothing written outside the target",
        figures={"cases": cases, "refused": refused, "normalised": normalised},
    )
    assert not problems, "\n".join(problems)


def _install_case(case: Case) -> tuple[str, list[str]]:
    """Build the image and the zipapp of the case's wheel; the outcome and what went wrong."""
    problems: list[str] = []
    outcomes: list[str] = []
    deps = (wheel_artifact(case.wheel),)
    before = snapshot(case.outside)
    for kind in ("image", "zipapp"):
        try:
            if kind == "image":
                wrapped(ImageBuilder()).run(image_action(case), case.ctx(), deps)
            else:
                wrapped(ZipappBuilder(zipapp_options)).run(zipapp_action(case), case.ctx(), deps)
        except BuildError as exc:
            outcomes.append(f"{kind} refused")
            if "Traceback" in str(exc):
                problems.append(f"{case.name}: {kind}: a traceback in the error: {exc}")
            continue
        outcomes.append(f"{kind} neutralised")
    dist = case.repo / "dist"
    layout = dist / "images" / "evil"
    if layout.is_dir():
        found = read_layout(layout, [Platform.parse(p) for p in case.platforms])
        for image, _ in found.values():
            for layer in image.layers[1:]:  # shipyard's own: dependencies and app
                check_layer_tar(layer.path, problems, case.name)
    for pyz in sorted((dist / "zipapps").glob("*.pyz")) if (dist / "zipapps").is_dir() else []:
        check_zip_modes(pyz, problems, case.name)
        zroot = case.folder / "zroot"
        done = run(pyz, zroot)
        # 9: the duplicate entry's main() won; either copy is the wheel's own code.
        if done.returncode not in (0, 2, 9) or "Traceback" in done.stderr:
            problems.append(f"{case.name}: the zipapp failed: {done.returncode} {done.stderr}")
        # The unpacked sites (each build folder also holds its private `use` file).
        for path in zroot.glob("*/site/**/*") if zroot.exists() else []:
            mode = path.lstat().st_mode
            if path.is_symlink() or (path.is_file() and stat.S_IMODE(mode) not in (0o644, 0o755)):
                problems.append(f"{case.name}: unpacked {path} has mode {mode:o}")
    if snapshot(case.outside) != before:
        problems.append(f"{case.name}: the sentinel folder changed")
    # The installer's own cache, under sanitised names, and the zipapp's unpacked site.
    allowed = (case.folder / "uv", *(case.folder / "zroot").glob("*/site"))
    for path in payload_files(case.folder):
        if not any(path.is_relative_to(folder) for folder in allowed):
            problems.append(f"{case.name}: the payload was written to {path}")
    return ", ".join(outcomes), problems


@pytest.mark.reliability
def test_hostile_wheels_installed_for_images_and_zipapps_stay_inside(tmp_path: Path) -> None:
    cases = [
        make_case(tmp_path / str(n), name, extra, pip)
        for n, (name, (extra, pip)) in enumerate(WHEELS.items())
    ]
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(_install_case, cases))
    seconds = time.monotonic() - started
    problems = [p for _, found in results for p in found]
    installs = sum(len(c.platforms) + 1 for c in cases)
    refused = sum(outcome.count("refused") for outcome, _ in results)
    builds = 2 * len(cases)
    record(
        "hostile wheels installed into image and zipapp sites",
        area="archives",
        cases=installs,
        injected=f"{len(cases)} hostile wheels (escaping names, symlink entries and writes "
        "through them, setuid/setgid/device modes, duplicates) installed for an image "
        f"(uv, and pip for {sum(len(c.platforms) == 2 for c in cases)} of them) and a zipapp (uv), "
        "the zipapp then run so its native part is unpacked",
        result=f"{installs} installs in {builds} builds: {refused} builds refused, "
        f"{builds - refused} neutralised (plain 0644/0755 files inside the site); layers, "
        f"zipapps and unpacked files clean; nothing outside written, {seconds:.0f}s",
        figures={
            "cases": installs,
            "builds": builds,
            "refused": refused,
            "problems": len(problems),
            "seconds": round(seconds, 1),
        },
    )
    assert not problems, "\n".join(problems)
