"""Shared makers for the hostile-archive tests: evil wheels, build cases, output checks.

A case is one hostile wheel of `evilpkg`, a repository with an OCI layout base
and a sentinel folder beside it that nothing may touch; the checks read what a
build wrote (layer tars, zipapps) for unsafe names, links out and odd modes.
"""

from __future__ import annotations

import base64
import hashlib
import os
import posixpath
import stat
import tarfile
import warnings
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from shipyard.builders.distributions import Distribution
from shipyard.builders.resolve import Resolution
from shipyard.builders.zipapp import ZipappOptions
from shipyard.engine.plan import Action
from shipyard.engine.scheduler import Artifact, BuildContext
from shipyard.manifest import Image as ImageSettings
from shipyard.oci.layer import BlobStore, Entry, write_layer
from shipyard.oci.layout import write_layout
from shipyard.oci.model import Config, Image, Platform, append_layer, make_index
from shipyard.stamp import Stamp

EPOCH = 1704067200
PAYLOAD = b"EVIL-PAYLOAD-3d9a51\n"
# Stands for the absolute path of the case's sentinel folder in entry names.
OUT = "@OUT@"


def _hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


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
    write_zip(path, "w", files)
    return path


def write_zip(path: Path, mode: Literal["w", "a"], entries: Sequence[WheelEntry]) -> None:
    """Write (or append) zip `entries` with their Unix modes, duplicates allowed."""
    with warnings.catch_warnings(), zipfile.ZipFile(path, mode) as archive:
        warnings.simplefilter("ignore")  # "Duplicate name": one case wants one
        for name, data, st_mode in entries:
            info = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))
            info.create_system = 3
            info.external_attr = st_mode << 16
            archive.writestr(info, data)


def check_zip_modes(path: Path, problems: list[str], case: str) -> None:
    """Every member of a zip shipyard wrote: unique, safe names, plain 0644/0755 modes."""
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
        """The build's environment: caches and temporaries in the case folder, offline."""
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
        """A build context for the case's repository (version 1.0, fixed epoch)."""
        stamp = Stamp("1.0", "abc123", False, EPOCH)
        return BuildContext(self.repo, self.repo / "dist", stamp, "3.11", self.env)


def _base_layout(repo: Path, platforms: Sequence[str]) -> None:
    store = BlobStore(repo.parent / "base-store")
    images = []
    for platform in platforms:
        layer = write_layer([Entry("etc/os-release", data=b"ID=debian\n")], store, EPOCH)
        images.append(append_layer(Image(Platform.parse(platform), config=Config()), layer))
    write_layout(repo / "base", make_index(images), ref="1")


def make_case(folder: Path, name: str, extra: Sequence[WheelEntry], pip: bool) -> Case:
    """A case in `folder`: repo with a base layout, sentinel folder and the hostile wheel."""
    repo, outside = folder / "repo", folder / "outside"
    for path in (repo / "src", outside, folder / "tmp", folder / "uv", folder / "cache"):
        path.mkdir(parents=True)
    (outside / "keep").write_text("sentinel\n")
    platforms = ("linux/amd64", "linux/386") if pip else ("linux/amd64",)
    _base_layout(repo, platforms)
    wheel = make_wheel(folder / "wheels" / "evilpkg-1.0-py3-none-any.whl", extra, outside)
    return Case(name, folder, repo, outside, wheel, platforms)


def wheel_artifact(path: Path) -> Artifact:
    """The wheel at `path` as a dependency artifact of a build."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return Artifact("wheel", "", "py3-none-any", path, digest, path.stat().st_size)


def image_action(case: Case) -> Action:
    """An image build of evilpkg on the case's layout base."""
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


def zipapp_action(case: Case) -> Action:
    """A zipapp build of evilpkg for linux/amd64."""
    return Action("zipapp:evil", "zipapp", ("evil",), case.repo / "src", ("linux/amd64",))


def zipapp_options(action: Action) -> ZipappOptions:
    """The zipapp builder's options: evilpkg:main as the entry point."""
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


def payload_files(folder: Path) -> list[Path]:
    """Regular files under `folder` that hold the payload."""
    return [
        p
        for p in folder.rglob("*")
        if p.is_file() and not p.is_symlink() and p.read_bytes() == PAYLOAD
    ]


SiteHazard = Callable[[Path, Path], None]  # (site, outside)


class HostileInstaller:
    """Installs like `resolve` (the wheel unpacked), then leaves a hazard in the site."""

    def __init__(self, hazard: SiteHazard, outside: Path) -> None:
        self.hazard = hazard
        self.outside = outside

    def __call__(
        self,
        wheels: Path | Sequence[Path],
        platform: str,
        python: str,
        dest: Path,
        *,
        env: Mapping[str, str],
        log: Path,
        requirements: Path | None = None,
        extras: Sequence[str] = (),
    ) -> Resolution:
        for wheel in [wheels] if isinstance(wheels, Path) else wheels:
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(dest)
        self.hazard(dest, self.outside)
        return Resolution(platform, dest, (Distribution("evilpkg", "1.0", False),), False)
