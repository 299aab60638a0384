"""Hostile archives: wheels, zipapps and base layers that try to write outside their target.

Every place shipyard unpacks or re-packs an archive is fed entries that escape
(`../`, absolute paths, backslashes, drive letters), links out followed by a
write through them, hard links to /etc/passwd, setuid and setgid bits, device
nodes, pipes, duplicates and whiteouts aimed outside. Each must be refused with
an error naming the entry, or neutralised (a plain file, mode 0644 or 0755,
inside the target); a sentinel folder beside the target must stay untouched.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import posixpath
import shutil
import socket
import stat
import tarfile
import tempfile
import time
import warnings
import zipfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

import pytest

from shipyard.builders import zipapp as zipapp_module
from shipyard.builders.image import ImageBuilder
from shipyard.builders.resolve import Distribution, Resolution
from shipyard.builders.wheel import normalize_wheel
from shipyard.builders.zipapp import ZipappBuilder, ZipappOptions
from shipyard.builders.zipapp import _boot as boot
from shipyard.engine.plan import Action
from shipyard.engine.scheduler import Artifact, BuildContext
from shipyard.engine.wrapper import Wrapped
from shipyard.errors import BuildError, ShipyardError
from shipyard.manifest import Image as ImageSettings
from shipyard.oci.archive import write_docker_archive
from shipyard.oci.base import load_base
from shipyard.oci.layer import BlobStore, Entry, layer_from_tarball, write_layer
from shipyard.oci.layout import read_layout, write_layout
from shipyard.oci.model import (
    Config,
    Descriptor,
    Image,
    Layer,
    OCIError,
    Platform,
    append_layer,
    make_index,
)
from shipyard.stamp import Stamp
from tests.reliability import record
from tests.unit.test_hostile_sources import snapshot, within
from tests.unit.test_zipapp_boot import make_pyz, run

EPOCH = 1704067200
PAYLOAD = b"EVIL-PAYLOAD-3d9a51\n"
ROOT = os.geteuid() == 0
# Stands for the absolute path of the case's sentinel folder in entry names.
OUT = "@OUT@"


def _hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


# ---------------------------------------------------------------------------- wheels

WheelEntry = tuple[str, bytes, int]  # name, data, st_mode (type and permission bits)
BASE_FILES: list[WheelEntry] = [
    ("evilpkg/__init__.py", b"def main():\n    return 0\n", 0o100644),
    # Native code, so the zipapp unpacks evilpkg at run time: that path is tested too.
    ("evilpkg/_speed.so", b"\x7fELF", 0o100755),
    (
        "evilpkg-1.0.dist-info/METADATA",
        b"Metadata-Version: 2.1\nName: evilpkg\nVersion: 1.0\n",
        0o100644,
    ),
    (
        "evilpkg-1.0.dist-info/WHEEL",
        b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        0o100644,
    ),
]


def make_wheel(path: Path, extra: Sequence[WheelEntry], outside: Path) -> Path:
    """A wheel of evilpkg with `extra` entries (and RECORD rows for them)."""
    files = [(n.replace(OUT, str(outside)), d, m) for n, d, m in [*BASE_FILES, *extra]]
    rows = [f"{n},sha256={_hash(d)},{len(d)}" for n, d, _ in files]
    rows.append("evilpkg-1.0.dist-info/RECORD,,")
    files.append(("evilpkg-1.0.dist-info/RECORD", "\n".join(rows).encode() + b"\n", 0o100644))
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_zip(path, "w", files)
    return path


def _write_zip(path: Path, mode: Literal["w", "a"], entries: Sequence[WheelEntry]) -> None:
    with warnings.catch_warnings(), zipfile.ZipFile(path, mode) as archive:
        warnings.simplefilter("ignore")  # "Duplicate name": one case wants one
        for name, data, st_mode in entries:
            info = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))
            info.create_system = 3
            info.external_attr = st_mode << 16
            archive.writestr(info, data)


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


def _check_zip_modes(path: Path, problems: list[str], case: str) -> None:
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        if len(names) != len(set(names)):
            problems.append(f"{case}: {path.name} has duplicate names")
        for info in archive.infolist():
            mode = info.external_attr >> 16
            kind, bits = stat.S_IFMT(mode), stat.S_IMODE(mode)
            if info.is_dir():
                ok = kind in (0, stat.S_IFDIR) and bits in (0, 0o755)
            else:
                ok = kind == stat.S_IFREG and bits in (0o644, 0o755)
            if not ok:
                problems.append(f"{case}: {path.name}: {info.filename} has mode {mode:o}")
            if _unsafe(info.filename):
                problems.append(f"{case}: {path.name}: unsafe name {info.filename!r}")


def _unsafe(name: str) -> bool:
    parts = name.rstrip("/").split("/")
    return name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts)


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
            _check_zip_modes(target, problems, name)
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


@dataclass(frozen=True)
class Case:
    """One hostile wheel installed for an image and a zipapp, beside a sentinel folder."""

    name: str
    folder: Path
    repo: Path
    outside: Path
    wheel: Path
    platforms: tuple[str, ...]

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "SHIPYARD_CACHE_DIR": str(self.folder / "cache"),
            "UV_CACHE_DIR": str(self.folder / "uv"),
            "UV_OFFLINE": "1",
            "PIP_NO_INDEX": "1",
            "PIP_NO_CACHE_DIR": "1",
            "TMPDIR": str(self.folder / "tmp"),
        }

    def ctx(self) -> BuildContext:
        stamp = Stamp("1.0", "abc123", False, EPOCH)
        return BuildContext(self.repo, self.repo / "dist", stamp, "3.11", self.env)


def _base_layout(repo: Path, platforms: Sequence[str]) -> None:
    store = BlobStore(repo.parent / "base-store")
    images = []
    for platform in platforms:
        layer = write_layer([Entry("etc/os-release", data=b"ID=debian\n")], store, EPOCH)
        images.append(append_layer(Image(Platform.parse(platform), config=Config()), layer))
    write_layout(repo / "base", make_index(images), ref="1")


def _make_case(folder: Path, name: str, extra: Sequence[WheelEntry], pip: bool) -> Case:
    repo, outside = folder / "repo", folder / "outside"
    for path in (repo / "src", outside, folder / "tmp", folder / "uv", folder / "cache"):
        path.mkdir(parents=True)
    (outside / "keep").write_text("sentinel\n")
    platforms = ("linux/amd64", "linux/386") if pip else ("linux/amd64",)
    _base_layout(repo, platforms)
    wheel = make_wheel(folder / "wheels" / "evilpkg-1.0-py3-none-any.whl", extra, outside)
    return Case(name, folder, repo, outside, wheel, platforms)


def _artifact(path: Path) -> Artifact:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return Artifact("wheel", "", "py3-none-any", path, digest, path.stat().st_size)


def _image_action(case: Case) -> Action:
    settings = ImageSettings(base="oci-layout:base")
    return Action(
        "image:evil",
        "image",
        ("evil",),
        case.repo / "src",
        case.platforms,
        entrypoint="evilpkg:main",
        image=settings,
    )


def _zipapp_action(case: Case) -> Action:
    return Action("zipapp:evil", "zipapp", ("evil",), case.repo / "src", ("linux/amd64",))


def _options(action: Action) -> ZipappOptions:
    return ZipappOptions(entrypoint="evilpkg:main")


def check_layer_tar(path: Path, problems: list[str], case: str) -> None:
    """Every entry of a layer shipyard wrote: relative, inside, plain modes, no devices."""
    with tarfile.open(path, "r:gz") as tar:
        for member in tar.getmembers():
            where = f"{case}: layer entry {member.name}"
            if _unsafe(member.name):
                problems.append(f"{where}: unsafe name")
            if member.issym():
                target = posixpath.normpath(
                    posixpath.join(posixpath.dirname(member.name), member.linkname)
                )
                if member.linkname.startswith("/") or target.startswith(".."):
                    problems.append(f"{where}: symlink to {member.linkname} leaves the layer")
            elif member.isdir():
                if member.mode != 0o755:
                    problems.append(f"{where}: folder mode {member.mode:o}")
            elif not member.isfile() or member.mode not in (0o644, 0o755):
                problems.append(f"{where}: type {member.type!r} mode {member.mode:o}")


def _payload_files(folder: Path) -> list[Path]:
    return [
        p
        for p in folder.rglob("*")
        if p.is_file() and not p.is_symlink() and p.read_bytes() == PAYLOAD
    ]


def _install_case(case: Case) -> tuple[str, list[str]]:
    """Build the image and the zipapp of the case's wheel; the outcome and what went wrong."""
    problems: list[str] = []
    outcomes: list[str] = []
    deps = (_artifact(case.wheel),)
    before = snapshot(case.outside)
    for kind in ("image", "zipapp"):
        try:
            if kind == "image":
                Wrapped(ImageBuilder()).run(_image_action(case), case.ctx(), deps)
            else:
                Wrapped(ZipappBuilder(_options)).run(_zipapp_action(case), case.ctx(), deps)
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
        _check_zip_modes(pyz, problems, case.name)
        zroot = case.folder / "zroot"
        done = run(pyz, zroot)
        # 9: the duplicate entry's main() won; either copy is the wheel's own code.
        if done.returncode not in (0, 2, 9) or "Traceback" in done.stderr:
            problems.append(f"{case.name}: the zipapp failed: {done.returncode} {done.stderr}")
        for path in zroot.rglob("*") if zroot.exists() else []:
            mode = path.lstat().st_mode
            if path.is_symlink() or (path.is_file() and stat.S_IMODE(mode) not in (0o644, 0o755)):
                problems.append(f"{case.name}: unpacked {path} has mode {mode:o}")
    if snapshot(case.outside) != before:
        problems.append(f"{case.name}: the sentinel folder changed")
    allowed = (case.folder / "uv",)  # the installer's own cache, under sanitised names
    for path in _payload_files(case.folder):
        if not any(path.is_relative_to(folder) for folder in allowed):
            problems.append(f"{case.name}: the payload was written to {path}")
    return ", ".join(outcomes), problems


@pytest.mark.reliability
def test_hostile_wheels_installed_for_images_and_zipapps_stay_inside(tmp_path: Path) -> None:
    cases = [
        _make_case(tmp_path / str(n), name, extra, pip)
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


# ------------------------------------------------ an installer that leaves hazards in the site

SiteHazard = Callable[[Path, Path], None]  # (site, outside)


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


class HostileInstaller:
    """Installs like `resolve` (the wheel unpacked), then leaves a hazard in the site."""

    def __init__(self, hazard: SiteHazard, outside: Path) -> None:
        self.hazard = hazard
        self.outside = outside

    def __call__(
        self,
        wheel: Path,
        platform: str,
        python: str,
        dest: Path,
        *,
        env: Mapping[str, str],
        log: Path,
        requirements: Path | None = None,
    ) -> Resolution:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(dest)
        self.hazard(dest, self.outside)
        return Resolution(platform, dest, (Distribution("evilpkg", "1.0", False),), False)


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
        case = _make_case(tmp_path / str(number), name, [], pip=False)
        installer = HostileInstaller(plant, case.outside)
        monkeypatch.setattr(zipapp_module, "resolve", installer)
        deps = (_artifact(case.wheel),)
        before = snapshot(case.outside)
        builds: dict[str, Callable[[], object]] = {
            "image": partial(
                Wrapped(ImageBuilder(installer)).run, _image_action(case), case.ctx(), deps
            ),
            "zipapp": partial(
                Wrapped(ZipappBuilder(_options)).run, _zipapp_action(case), case.ctx(), deps
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
            _check_zip_modes(pyz, problems, name)
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


# ---------------------------------------------------------------- zipapp unpacking at run time

ZipEntry = tuple[str, bytes, int]
ZIP_CASES: dict[str, tuple[list[ZipEntry], tuple[str, ...]]] = {
    # name: (entries added to a pyz, tops unpacked)
    "../../../ below a top": ([("site/app/../../../evil", PAYLOAD, 0o100644)], ("app",)),
    "../ below a folder": ([("site/app/x/../../../../evil", PAYLOAD, 0o100644)], ("app",)),
    "empty part (//)": ([("site/app//evil", PAYLOAD, 0o100644)], ("app",)),
    "dot part": ([("site/app/./evil", PAYLOAD, 0o100644)], ("app",)),
    "top '..'": ([("site/../evil", PAYLOAD, 0o100644)], ("..",)),
    "top '../..'": ([("site/../../evil", PAYLOAD, 0o100644)], ("../..",)),
    "top with ../ inside": ([("site/app/../../evil", PAYLOAD, 0o100644)], ("app/../..",)),
    "symlink entry": ([("site/app/link", b"/etc/passwd", 0o120777)], ("app",)),
    "symlink folder, then a file through it": (
        [("site/app/out", b"/tmp", 0o120777), ("site/app/out/evil", PAYLOAD, 0o100644)],
        ("app",),
    ),
    "setuid": ([("site/app/suid", b"x", 0o104755)], ("app",)),
    "setgid": ([("site/app/sgid", b"x", 0o102755)], ("app",)),
    "world-writable": ([("site/app/ww", b"x", 0o100666)], ("app",)),
    "fifo mode": ([("site/app/pipe", b"", 0o010644)], ("app",)),
    "device mode": ([("site/app/dev", b"", 0o020644)], ("app",)),
    "duplicate name": ([("site/app/__init__.py", b"raise SystemExit(7)\n", 0o100644)], ("app",)),
}
NATIVE_APP = "def main():\n    print('ok')\n"


def _add_entries(pyz: Path, entries: Sequence[ZipEntry]) -> None:
    _write_zip(pyz, "a", entries)


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
    for number, (name, (entries, tops)) in enumerate(ZIP_CASES.items()):
        case = tmp_path / str(number)
        # Deep enough that every ../ above still lands inside `case`, where it is seen.
        work = case / "a" / "b" / "c"
        work.mkdir(parents=True)
        outside = case / "outside"
        outside.mkdir()
        pyz = make_pyz(work, {"app/__init__.py": NATIVE_APP, "app/_s.so": b"\x7fELF"})
        _add_entries(pyz, entries)
        target = work / "cache" / "build" / "site"
        got = within(30, partial(boot.unpack, str(pyz), list(tops), str(target)))
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
        stray = [p for p in _payload_files(case) if not p.is_relative_to(target)]
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
    if _payload_files(tmp_path / "run"):
        problems.append("running a damaged archive wrote the payload")
    cases = len(ZIP_CASES) + 1
    record(
        "hostile entries in a zipapp unpacked at run time",
        area="archives",
        cases=cases,
        injected=f"{len(ZIP_CASES)} archives with ../, // and ./ names, tops naming '..', "
        "symlink entries and files through them, setuid/setgid/world-writable/fifo/device "
        "modes, a duplicate name; and one damaged archive run end to end",
        result=f"{refused} refused (nothing left behind), {neutralised} unpacked as plain "
        "0644/0755 files inside the target; the damaged archive exits 2 with one line; "
        "nothing written outside the target",
        figures={"cases": cases, "refused": refused, "neutralised": neutralised},
    )
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------------------ base layers


@dataclass(frozen=True)
class Member:
    """One tar entry of a hand-made layer."""

    name: str
    kind: bytes = tarfile.REGTYPE
    data: bytes = b""
    link: str = ""
    mode: int = 0o644


def tar_of(members: Sequence[Member]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for m in members:
            info = tarfile.TarInfo(m.name)
            info.type, info.mode, info.linkname, info.mtime = m.kind, m.mode, m.link, EPOCH
            if m.kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
                info.devmajor, info.devminor = 1, 3
            if m.kind == tarfile.REGTYPE:
                info.size = len(m.data)
                tar.addfile(info, io.BytesIO(m.data))
            else:
                tar.addfile(info)
    return buffer.getvalue()


def _f(name: str, **kw: object) -> Member:
    return Member(name, data=PAYLOAD, **kw)  # type: ignore[arg-type]


SYM, LNK, DIR = tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.DIRTYPE
# name: (members, what the error says)
HOSTILE_LAYERS: dict[str, tuple[list[Member], str]] = {
    "../evil": ([_f("../evil")], "'..'"),
    "./../evil": ([_f("./../evil")], "'..'"),
    "etc/../../evil": ([_f("etc/../../evil")], "'..'"),
    "absolute /etc/evil": ([_f("/etc/evil")], "absolute"),
    "long PAX name with ../": ([_f("a/" * 60 + "../" * 70 + "evil")], "'..'"),
    "symlink to /etc, then a file through it": (
        [Member("etc2", SYM, link="/etc"), _f("etc2/passwd")],
        "through the symlink",
    ),
    "symlink up, then a folder through it": (
        [Member("up", SYM, link="../../.."), Member("up/x", DIR, mode=0o755)],
        "through the symlink",
    ),
    "symlink, then a file over it": (
        [Member("l", SYM, link="/tmp/evil"), _f("l")],
        "through the symlink",
    ),
    "hard link to /etc/passwd": ([Member("pw", LNK, link="/etc/passwd")], "absolute"),
    "hard link to ../../etc/passwd": ([Member("pw", LNK, link="../../etc/passwd")], "'..'"),
    "hard link through a symlink": (
        [Member("e", SYM, link="/etc"), Member("pw", LNK, link="e/passwd")],
        "through the symlink",
    ),
    "whiteout of '..'": ([Member("usr/.wh..."), _f("usr/x")], "whiteout"),
    "whiteout with no name": ([Member("usr/.wh.")], "whiteout"),
    "whiteout ../.wh.etc": ([Member("../.wh.etc")], "'..'"),
    "whiteout through a symlink": (
        [Member("s", SYM, link="/"), Member("s/.wh.etc")],
        "through the symlink",
    ),
}
# Normal in a root file system; kept as they are, never unpacked by shipyard.
KEPT_LAYERS: dict[str, list[Member]] = {
    "setuid and setgid programs": [_f("usr/bin/su", mode=0o4755), _f("usr/bin/wall", mode=0o2755)],
    "device nodes and a fifo": [
        Member("dev/null", tarfile.CHRTYPE, mode=0o666),
        Member("dev/loop0", tarfile.BLKTYPE, mode=0o660),
        Member("run/initctl", tarfile.FIFOTYPE, mode=0o600),
    ],
    "absolute symlinks and a hard link inside": [
        Member("./usr/bin/python3", SYM, link="/usr/bin/python3.11"),
        _f("./usr/bin/perl"),
        Member("./usr/bin/perl5", LNK, link="./usr/bin/perl"),
        Member("./.wh..wh..opq"),
        Member("usr/share/.wh.doc"),
    ],
}
SOURCES = ("rootfs tar", "rootfs tar.gz", "docker-archive", "oci-layout")


def _base_from(kind: str, layer_tar: bytes, folder: Path) -> str:
    """Write a base of `kind` with one layer; the base text for load_base (root: `folder`)."""
    if kind == "rootfs tar":
        (folder / "rootfs.tar").write_bytes(layer_tar)
        return "rootfs:rootfs.tar;linux/amd64"
    if kind == "rootfs tar.gz":
        (folder / "rootfs.tar.gz").write_bytes(gzip.compress(layer_tar, mtime=0))
        return "rootfs:rootfs.tar.gz;linux/amd64"
    store = BlobStore(folder / "maker-store")
    layer = layer_from_tarball(io.BytesIO(layer_tar), store)
    image = append_layer(Image(Platform("linux", "amd64"), config=Config()), layer)
    if kind == "docker-archive":
        write_docker_archive(folder / "base.tar", image, ["base:1"], EPOCH)
        return "docker-archive:base.tar"
    write_layout(folder / "base", make_index([image]), ref="1")
    return "oci-layout:base"


def _tree_state(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.reliability
def test_hostile_base_layers_are_refused_from_every_source(tmp_path: Path) -> None:
    problems: list[str] = []
    refused = kept = 0
    for kind in SOURCES:
        for name, (members, says) in HOSTILE_LAYERS.items():
            folder = tmp_path / f"{kind}-{refused + kept}"
            (folder / "outside").mkdir(parents=True)
            text = _base_from(kind, tar_of(members), folder)
            store = BlobStore(folder / "store")
            got = within(30, partial(load_base, text, ["linux/amd64"], root=folder, store=store))
            if isinstance(got, OCIError) and says in str(got):
                refused += 1
            else:
                problems.append(
                    f"{kind}: {name}: expected an OCIError saying {says!r}, got {got!r}"
                )
            if snapshot(folder / "outside") or (folder / "evil").exists():
                problems.append(f"{kind}: {name}: something was written outside")
        for name, members in KEPT_LAYERS.items():
            folder = tmp_path / f"{kind}-kept-{kept + refused}"
            (folder / "outside").mkdir(parents=True)
            data = tar_of(members)
            text = _base_from(kind, data, folder)
            before = _tree_state(folder)
            try:
                bases = load_base(
                    text, ["linux/amd64"], root=folder, store=BlobStore(folder / "store")
                )
            except OCIError as exc:
                problems.append(f"{kind}: {name}: refused a normal root file system: {exc}")
                continue
            kept += 1
            (layer,) = bases["linux/amd64"].image.layers
            if gzip.decompress(layer.path.read_bytes()) != data:
                problems.append(f"{kind}: {name}: the base layer's tar was changed")
            created = {p for p in _tree_state(folder) - before if not p.startswith("store")}
            if created or snapshot(folder / "outside"):
                problems.append(f"{kind}: {name}: files appeared outside the store: {created}")
    cases = refused + kept
    record(
        "hostile base image layers",
        area="archives",
        cases=len(SOURCES) * (len(HOSTILE_LAYERS) + len(KEPT_LAYERS)),
        injected=f"{len(HOSTILE_LAYERS)} hostile layers (../ and absolute names, a long PAX "
        "name, symlinks out with files and folders written through or over them, hard links "
        "to /etc/passwd and through symlinks, whiteouts of '..', empty and through links) "
        f"and {len(KEPT_LAYERS)} normal ones with setuid programs, device nodes, a fifo and "
        f"absolute symlinks, each as {len(SOURCES)} base sources ({', '.join(SOURCES)})",
        result=f"{refused} hostile bases refused naming the entry, {kept} normal ones kept "
        "byte for byte; nothing unpacked, nothing written outside the blob store",
        figures={"cases": cases, "refused": refused, "kept": kept},
    )
    assert not problems, "\n".join(problems)


@pytest.mark.reliability
def test_damaged_base_blobs_and_docker_archives_are_refused(tmp_path: Path) -> None:
    problems: list[str] = []
    good = tar_of([_f("etc/os-release")])
    checks: list[tuple[str, Callable[[Path], str], str]] = []

    def tampered(folder: Path) -> str:
        text = _base_from("oci-layout", good, folder)
        (blob,) = [p for p in (folder / "base" / "blobs" / "sha256").iterdir() if _is_gzip(p)]
        data = gzip.compress(tar_of([_f("etc/os-releasX")]), mtime=0)
        blob.chmod(0o644)
        blob.write_bytes(data[: blob.stat().st_size].ljust(blob.stat().st_size, b"\0"))
        return text

    def linked_to_a_host_file(folder: Path) -> str:
        text = _base_from("oci-layout", good, folder)
        (blob,) = [p for p in (folder / "base" / "blobs" / "sha256").iterdir() if _is_gzip(p)]
        host = folder / "outside" / "host-file"
        host.write_bytes(b"h" * blob.stat().st_size)  # same size: only the digest tells
        blob.unlink()
        blob.symlink_to(host)
        return text

    def zstd(folder: Path) -> str:
        blob = folder / "layer.zst"
        blob.write_bytes(b"\x28\xb5\x2f\xfd".ljust(64, b"\0"))
        digest = "sha256:" + hashlib.sha256(blob.read_bytes()).hexdigest()
        kind = "application/vnd.oci.image.layer.v1.tar+zstd"
        layer = Layer(Descriptor(kind, digest, 64), "sha256:" + "0" * 64, blob)
        image = append_layer(Image(Platform("linux", "amd64"), config=Config()), layer)
        write_layout(folder / "base", make_index([image]), ref="1")
        return "oci-layout:base"

    checks += [
        ("a layout blob changed after writing", tampered, "digest"),
        ("a layout blob linked to a host file", linked_to_a_host_file, "digest"),
        ("a zstd layer", zstd, "zstd"),
    ]
    for member in ("../../etc/passwd", "/etc/passwd", "blobs/../../../../etc/passwd"):
        for key in ("Layers", "Config"):
            checks.append(
                (
                    f"docker-archive {key} naming {member}",
                    _archive_naming(key, member),
                    "docker-archive",
                )
            )
    checks += [
        (
            "docker-archive layer that is a symlink to /etc/passwd",
            _archive_link(SYM),
            "docker-archive",
        ),
        (
            "docker-archive layer that is a hard link to /etc/passwd",
            _archive_link(LNK),
            "docker-archive",
        ),
    ]
    passwd = Path("/etc/passwd").read_bytes()
    for number, (name, make, says) in enumerate(checks):
        folder = tmp_path / str(number)
        (folder / "outside").mkdir(parents=True)
        text = make(folder)
        store = BlobStore(folder / "store")
        got = within(30, partial(load_base, text, ["linux/amd64"], root=folder, store=store))
        if not isinstance(got, OCIError) or says not in str(got):
            problems.append(f"{name}: expected an OCIError saying {says!r}, got {got!r}")
        stored = [p for p in store.root.rglob("*") if p.is_file()] if store.root.exists() else []
        if any(passwd in _inflated(p) for p in stored):
            problems.append(f"{name}: /etc/passwd was copied into the blob store")
    record(
        "damaged base blobs and docker-archives",
        area="archives",
        cases=len(checks),
        injected="a layout layer blob altered or replaced by a link to a same-size host "
        "file, a zstd layer, docker-archives whose manifest names ../, absolute and "
        "blobs/../ paths, and whose layer member is a symlink or hard link to /etc/passwd",
        result=f"{len(checks) - len(problems)}/{len(checks)} refused with an OCIError; "
        "no host file read into the blob store",
        figures={"cases": len(checks), "failures": len(problems)},
    )
    assert not problems, "\n".join(problems)


def _is_gzip(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:2] == b"\x1f\x8b"


def _inflated(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _archive(folder: Path, manifest: bytes, members: Sequence[Member]) -> str:
    with tarfile.open(folder / "base.tar", "w") as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        for m in members:
            info = tarfile.TarInfo(m.name)
            info.type, info.linkname = m.kind, m.link
            info.size = len(m.data) if m.kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(m.data))
    return "docker-archive:base.tar"


def _archive_naming(key: str, member: str) -> Callable[[Path], str]:
    def make(folder: Path) -> str:
        config = (
            b'{"os":"linux","architecture":"amd64","rootfs":{"diff_ids":["sha256:'
            + b"0" * 64
            + b'"]}}'
        )
        entry: dict[str, object] = {"Config": "config.json", "Layers": ["layer.tar"]}
        entry[key] = member if key == "Config" else [member]
        manifest = ("[" + _json(entry) + "]").encode()
        return _archive(
            folder,
            manifest,
            [Member("config.json", data=config), Member("layer.tar", data=tar_of([]))],
        )

    return make


def _archive_link(kind: bytes) -> Callable[[Path], str]:
    def make(folder: Path) -> str:
        config = (
            b'{"os":"linux","architecture":"amd64","rootfs":{"diff_ids":["sha256:'
            + b"0" * 64
            + b'"]}}'
        )
        manifest = b'[{"Config":"config.json","Layers":["layer.tar"]}]'
        members = [
            Member("config.json", data=config),
            Member("layer.tar", kind, link="/etc/passwd"),
        ]
        return _archive(folder, manifest, members)

    return make


def _json(value: object) -> str:
    return json.dumps(value)


@pytest.mark.reliability
def test_an_image_build_on_a_hostile_base_fails_cleanly(tmp_path: Path) -> None:
    problems: list[str] = []
    for number, (name, (members, says)) in enumerate(list(HOSTILE_LAYERS.items())[:5]):
        case = _make_case(tmp_path / str(number), name, [], pip=False)
        shutil.rmtree(case.repo / "base")
        _base_from("oci-layout", tar_of(members), case.repo)
        with pytest.raises(BuildError) as caught:
            Wrapped(ImageBuilder(HostileInstaller(lambda s, o: None, case.outside))).run(
                _image_action(case), case.ctx(), (_artifact(case.wheel),)
            )
        if says not in str(caught.value) or "base image oci-layout:base" not in str(caught.value):
            problems.append(f"{name}: {caught.value}")
        if (case.repo / "dist" / "images" / "evil").exists():
            problems.append(f"{name}: an image was written")
    record(
        "image builds on hostile bases",
        area="archives",
        cases=5,
        injected="the image builder given an OCI layout base whose layer escapes its root",
        result=f"{5 - len(problems)}/5 failed with one BuildError naming the base and "
        "the entry; no image written",
        figures={"cases": 5, "failures": len(problems)},
    )
    assert not problems, "\n".join(problems)
