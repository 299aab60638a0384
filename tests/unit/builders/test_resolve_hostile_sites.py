"""Hazards an installer leaves in a site: links out, pipes, sockets, devices, odd modes.

A fake installer unpacks the wheel like `resolve`, then plants one hazard in the
site; the image and zipapp builders must refuse it naming the path, or
neutralise it (modes 0644/0755 in the outputs), and never hang.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tarfile
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from shipyard.builders import resolve as resolve_module
from shipyard.builders.image import ImageBuilder
from shipyard.builders.zipapp import ZipappBuilder
from shipyard.engine.run import wrapped
from shipyard.errors import BuildError
from tests.reliability import record
from tests.unit._hostile import (
    HostileInstaller,
    SiteHazard,
    check_layer_tar,
    check_zip_modes,
    image_action,
    make_case,
    wheel_artifact,
    zipapp_action,
    zipapp_options,
)
from tests.unit.files.test_sources_hostile import snapshot, within

ROOT = os.geteuid() == 0


def _fifo(site: Path, outside: Path) -> None:
    os.mkfifo(site / "evilpkg" / "pipe")


def _chain(site: Path, outside: Path) -> None:
    # Each link is inside as written; through the first, the second leads out.
    (site / "evilpkg" / "sub").mkdir()
    (site / "evilpkg" / "sub" / "u").symlink_to("..")
    (site / "evilpkg" / "p").symlink_to("sub/u/../../..")


def _loop(site: Path, outside: Path) -> None:
    (site / "a").symlink_to("b")
    (site / "b").symlink_to("a")


def _unix_socket(site: Path, outside: Path) -> None:
    # Made where its path is short enough for AF_UNIX, then moved in.
    folder = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))
    try:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(folder / "s"))
        server.close()
        os.rename(folder / "s", site / "s")
    finally:
        shutil.rmtree(folder)


SITE_HAZARDS: dict[str, tuple[SiteHazard, bool]] = {
    # name: (plant, must be refused (else neutralised))
    "file link to the sentinel": (
        lambda s, o: (s / "evilpkg" / "leak").symlink_to(o / "keep"),
        True,
    ),
    "file link to /etc/passwd": (
        lambda s, o: (s / "evilpkg" / "pw").symlink_to("/etc/passwd"),
        True,
    ),
    "folder link out by ../": (
        lambda s, o: (s / "evilpkg" / "out").symlink_to(os.path.relpath(o, s / "evilpkg")),
        True,
    ),
    "link inside as written, out through another link": (_chain, True),
    "link loop": (_loop, True),
    "fifo": (_fifo, True),
    "unix socket": (_unix_socket, True),
    "character device": (
        lambda s, o: os.mknod(s / "evilpkg" / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3)),
        True,
    ),
    "setuid file": (lambda s, o: _write_mode(s / "evilpkg" / "suid", 0o4755), False),
    "setgid folder": (lambda s, o: _mkdir_mode(s / "evilpkg" / "g", 0o2775), False),
    "world-writable file": (lambda s, o: _write_mode(s / "evilpkg" / "ww", 0o666), False),
    "backslash name": (lambda s, o: _write_mode(s / "evilpkg" / "a\\..\\b", 0o644), True),
}


def _write_mode(path: Path, mode: int) -> None:
    path.write_bytes(b"#!/bin/sh\n")
    path.chmod(mode)


def _mkdir_mode(path: Path, mode: int) -> None:
    path.mkdir()
    (path / "f.py").write_text("")
    path.chmod(mode)


@pytest.mark.reliability
def test_hazards_an_installer_leaves_in_a_site_are_refused_or_neutralised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    problems: list[str] = []
    refused = neutralised = 0
    runs = 0
    for number, (name, (plant, must_refuse)) in enumerate(SITE_HAZARDS.items()):
        if name == "character device" and not ROOT:
            continue
        case = make_case(tmp_path / str(number), name, [], pip=False)
        installer = HostileInstaller(plant, case.outside)
        # The zipapp builder imports the installer when it builds: replace it at its home.
        monkeypatch.setattr(resolve_module, "resolve", installer)
        deps = (wheel_artifact(case.wheel),)
        before = snapshot(case.outside)
        builds: dict[str, Callable[[], object]] = {
            "image": partial(
                wrapped(ImageBuilder(installer)).run, image_action(case), case.ctx(), deps
            ),
            "zipapp": partial(
                wrapped(ZipappBuilder(zipapp_options)).run, zipapp_action(case), case.ctx(), deps
            ),
        }
        for kind, build in builds.items():
            runs += 1
            got = within(30, build)
            if isinstance(got, BuildError):
                refused += 1
                if not must_refuse:
                    problems.append(f"{name}: {kind} refused what it should neutralise: {got}")
            elif isinstance(got, BaseException):
                problems.append(f"{name}: {kind}: {got!r}")
            else:
                neutralised += 1
                if must_refuse:
                    problems.append(f"{name}: {kind} built, expected a refusal")
        dist = case.repo / "dist"
        for blob in (dist / "images" / "evil" / "blobs" / "sha256").glob("*"):
            if blob.read_bytes()[:2] == b"\x1f\x8b" and blob.stat().st_size > 0:
                with tarfile.open(blob, "r:gz") as tar:
                    names = tar.getnames()
                if any(n.startswith("opt/") for n in names):
                    check_layer_tar(blob, problems, name)
        for pyz in (dist / "zipapps").glob("*.pyz"):
            check_zip_modes(pyz, problems, name)
        if snapshot(case.outside) != before:
            problems.append(f"{name}: the sentinel folder changed")
    record(
        "hazards an installer leaves in a site",
        area="archives",
        cases=runs,
        injected="an installer that leaves links out (file, folder, through another link, "
        "loop), a pipe, a socket, a device, setuid/setgid/world-writable modes or a "
        "backslash name in the site, for an image and a zipapp build each",
        result=f"{refused} builds refused naming the path, {neutralised} neutralised (modes "
        "0644/0755 in the outputs); none hung, the sentinel folder untouched",
        figures={"cases": runs, "refused": refused, "neutralised": neutralised},
    )
    assert not problems, "\n".join(problems)
