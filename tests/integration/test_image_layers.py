"""Layered images of a binary with an in-repo library and a locked third-party dependency,
built from real projects and run by Docker (linux/arm64 under QEMU).

The app and the library are real pyproject projects built by `python -m build`
(shipyard's WheelBuilder); the third-party package is a tiny wheel at two versions
in a local find-links folder, and the binary's `requirements` lock pins the old one.
Resolution runs with uv, offline, against that folder only; the images run with
`--network none`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.builders.image import DEPS_SITE, LIBS_SITE, ImageBuilder
from shipyard.builders.wheel import WheelBuilder
from shipyard.engine.plan import Action
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import Artifact, BuildContext
from shipyard.manifest import Image as ImageSettings
from shipyard.oci.layout import read_layout
from shipyard.oci.model import Image, Platform
from shipyard.stamp import Stamp
from tests.integration._images import tarball
from tests.integration.conftest import Services
from tests.integration.test_images import OFFLINE, PLATFORMS, _run
from tests.unit.builders.test_resolve import make_wheel

pytestmark = pytest.mark.integration

VERSION = "0.3.0.dev0+layers"
TAG = "0.3.0.dev0-layers"
BINARY = "acmetool"
TOOL = """\
import importlib.metadata
import platform

import acme_common
import acmedep


def main() -> int:
    print(
        f"{acme_common.NAME} {importlib.metadata.version('acme-common')}",
        f"acmedep {acmedep.VERSION}",
        f"{importlib.metadata.version('acmedep')}",
        f"{platform.machine()}{EDIT}",
    )
    return 0


EDIT = ""
"""


def _project(folder: Path, name: str, dependencies: list[str], code: str) -> Path:
    """A hatchling project with one flat package, the way a pyproject.toml is written by hand."""
    package = folder / name.replace("-", "_")
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(code)
    deps = ", ".join(f'"{d}"' for d in dependencies)
    (folder / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
        f'[project]\nname = "{name}"\nversion = "0.1.0"\nrequires-python = ">=3.11"\n'
        f"dependencies = [{deps}]\n"
    )
    return folder


def _wheel(source: Path, dist: Path) -> Artifact:
    """The project's wheel, by `python -m build` (build backends from the local cache)."""
    env = {**os.environ, **OFFLINE, "SHIPYARD_CACHE_DIR": str(dist.parent / "cache")}
    ctx = BuildContext(source.parent, dist, Stamp(VERSION, "", False, 1704067200), "3.11", env)
    action = Action(f"wheel:{source.name}", "wheel", (source.name,), source)
    (wheel,) = wrapped(WheelBuilder()).run(action, ctx, ()).outputs
    return wheel


@dataclasses.dataclass(frozen=True)
class Scene:
    root: Path
    links: Path
    lock: Path
    library: Artifact
    app: Artifact


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Scene:
    root = tmp_path_factory.mktemp("layers")
    links = root / "links"
    for version in ("1.0", "2.0"):
        make_wheel(
            links, "acmedep", version, files={"acmedep/__init__.py": f"VERSION = '{version}'\n"}
        )
    old = links / "acmedep-1.0-py3-none-any.whl"
    lock = root / "requirements.lock"
    lock.write_text(
        f"acmedep==1.0 \\\n    --hash=sha256:{hashlib.sha256(old.read_bytes()).hexdigest()}\n"
    )
    common = _project(root / "libs" / "common", "acme-common", ["acmedep"], "NAME = 'common'\n")
    tool = _project(root / "apps" / "tool", "acme-tool", ["acme-common", "acmedep>=1"], TOOL)
    return Scene(root, links, lock, _wheel(common, root / "wheels"), _wheel(tool, root / "wheels"))


def _image(scene: Scene, base: str, dist: Path, app: Artifact) -> tuple[Path, dict[str, Image]]:
    """The binary's image for both platforms, resolved by uv from the find-links folder only."""
    env = {
        **os.environ,
        **OFFLINE,
        "UV_NO_INDEX": "1",
        "UV_FIND_LINKS": str(scene.links),
        "SHIPYARD_CACHE_DIR": str(scene.root / "cache"),
    }
    stamp = Stamp(VERSION, "0123456789abcdef0123456789abcdef01234567", False, 1704067200)
    ctx = BuildContext(scene.root, dist, stamp, "3.11", env)
    action = Action(
        f"image:{BINARY}",
        "image",
        (BINARY,),
        scene.root / "apps" / "tool",
        PLATFORMS,
        ("wheel:tool", "wheel:common"),
        entrypoint="acme_tool:main",
        image=ImageSettings(base=base),
        requirements=scene.lock,
        project="acme-tool",
    )
    wrapped(ImageBuilder()).run(action, ctx, (scene.library, app))
    found = read_layout(dist / "images" / BINARY, [Platform.parse(p) for p in PLATFORMS])
    return dist, {str(p): image for p, (image, _) in found.items()}


@pytest.fixture(scope="module")
def built(services: Services, scene: Scene) -> tuple[Path, dict[str, Image]]:
    return _image(scene, f"oci-layout:{services.base_layout}", scene.root / "dist", scene.app)


@pytest.mark.requires("base-layout")
def test_the_layers_are_third_party_libraries_then_the_binary(
    built: tuple[Path, dict[str, Image]],
) -> None:
    _, images = built
    for platform, image in images.items():
        assert [h.created_by for h in image.history][-3:] == [
            "shipyard: third-party dependencies",
            "shipyard: in-repo libraries",
            f"shipyard: {BINARY} {VERSION}",
        ], platform
        env = dict(line.partition("=")[::2] for line in image.config.env)
        assert env["PYTHONPATH"] == f"/opt/{BINARY}/site:{LIBS_SITE}:{DEPS_SITE}"


@pytest.mark.requires("base-layout")
def test_an_app_only_edit_changes_only_the_last_layer(
    services: Services, scene: Scene, built: tuple[Path, dict[str, Image]]
) -> None:
    _, before = built
    edited = scene.root / "edited" / "tool"
    _project(
        edited, "acme-tool", ["acme-common", "acmedep>=1"], TOOL.replace('EDIT = ""', 'EDIT = "!"')
    )
    app = _wheel(edited, scene.root / "edited-wheels")
    _, after = _image(scene, f"oci-layout:{services.base_layout}", scene.root / "dist-edit", app)
    for platform in PLATFORMS:
        old = [x.descriptor.digest for x in before[platform].layers]
        new = [x.descriptor.digest for x in after[platform].layers]
        assert old[:-1] == new[:-1], f"{platform}: a layer below the binary's changed"
        assert old[-1] != new[-1], f"{platform}: the binary's layer did not change"


@pytest.fixture
def loaded(built: tuple[Path, dict[str, Image]]) -> Iterator[list[str]]:
    """Both platforms' docker-archives loaded into Docker; their tags removed afterwards."""
    dist, _ = built
    tags: list[str] = []
    try:
        for platform in PLATFORMS:
            suffix = platform.replace("/", "_")
            archive = tarball(dist, BINARY, platform)
            done = _run("docker", "load", "--input", str(archive))
            assert done.returncode == 0, done.stderr
            tags += [f"{BINARY}:{TAG}-{suffix}", f"{BINARY}:{TAG}"]
        yield tags
    finally:
        for tag in dict.fromkeys(tags):
            _run("docker", "image", "rm", "--force", tag)


@pytest.mark.requires("base-layout", "docker", "qemu-aarch64")
def test_each_platform_runs_the_library_and_the_locked_old_version(
    services: Services, loaded: list[str]
) -> None:
    machines = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
    for platform in PLATFORMS:
        image = f"{BINARY}:{TAG}-{platform.replace('/', '_')}"
        done = _run("docker", "run", "--rm", "--network", "none", "--platform", platform, image)
        assert done.returncode == 0, f"{image}: {done.stderr}"
        assert done.stdout.split() == [
            "common", "0.1.0", "acmedep", "1.0", "1.0", machines[platform],
        ], f"{image} printed {done.stdout!r}"  # fmt: skip
