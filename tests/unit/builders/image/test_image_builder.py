"""ImageBuilder with a stand-in resolver: layers, config, annotations, reproducibility."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import tarfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

import pytest

from shipyard.builders.distributions import Distribution
from shipyard.builders.image import ImageBuilder
from shipyard.builders.image.archives import write_archive
from shipyard.builders.resolve import Locked, Resolution
from shipyard.engine.plan import Action
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import Artifact, BuildContext
from shipyard.errors import BuildError
from shipyard.manifest import Image as ImageSettings
from shipyard.oci.layer import BlobStore, Entry, write_layer
from shipyard.oci.layout import read_layout, write_layout
from shipyard.oci.model import Config, Image, Layer, Platform, append_layer, make_index
from shipyard.stamp import Stamp

EPOCH = 1704067200
PLATFORMS = ("linux/amd64", "linux/arm64")
MAIN = b"def main():\n    print('app says hi')\n    return 0\n"


def _hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel(folder: Path) -> Path:
    path = folder / "app-1.2.3-py3-none-any.whl"
    files = {
        "app/__init__.py": b"",
        "app/main.py": MAIN,
        "app-1.2.3.dist-info/METADATA": b"Metadata-Version: 2.1\nName: app\nVersion: 1.2.3\n",
        "app-1.2.3.dist-info/WHEEL": b"Wheel-Version: 1.0\nTag: py3-none-any\n",
    }
    record = "".join(f"{n},sha256={_hash(d)},{len(d)}\n" for n, d in files.items())
    record += "app-1.2.3.dist-info/RECORD,,\n"
    files["app-1.2.3.dist-info/RECORD"] = record.encode()
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            # A fixed time: the wheel is made anew for each build and must not differ.
            wheel.writestr(zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0)), data)
    return path


class StandIn:
    """Installs like `resolve`: the wheels unpacked plus a dependency, native when asked."""

    def __init__(self, native: bool = True) -> None:
        self.native = native
        self.calls: list[str] = []
        self.wheels: list[list[Path]] = []
        self.requirements: list[Path | Locked | None] = []

    def __call__(
        self,
        wheels: Path | Sequence[Path],
        platform: str,
        python: str,
        dest: Path,
        *,
        env: Mapping[str, str],
        log: Path,
        requirements: Path | Locked | None = None,
        extras: Sequence[str] = (),
    ) -> Resolution:
        self.calls.append(platform)
        self.wheels.append([wheels] if isinstance(wheels, Path) else list(wheels))
        self.requirements.append(requirements)
        for wheel in self.wheels[-1]:
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(dest)
        arch = platform.split("/")[1] if self.native else "any"
        (dest / "dep").mkdir()
        (dest / "dep" / "__init__.py").write_text("VALUE = 1\n")
        (dest / "dep" / f"_speed.{arch}.so").write_bytes(arch.encode())
        info = dest / "dep-2.0.dist-info"
        info.mkdir()
        (info / "RECORD").write_text(f"dep/__init__.py,,\ndep/_speed.{arch}.so,,\n")
        dists = (Distribution("app", "1.2.3", True), Distribution("dep", "2.0", not self.native))
        return Resolution(platform, dest, dists, not self.native)


def _base(root: Path) -> None:
    store = BlobStore(root / "base-store")
    images = []
    for platform in ("linux/amd64", "linux/arm64/v8"):
        layer = write_layer([Entry("etc/os-release", data=b"ID=debian\n")], store, EPOCH)
        config = Config(env=("PATH=/usr/bin:/bin", "LANG=C.UTF-8"), cmd=("python3",))
        images.append(append_layer(Image(Platform.parse(platform), config=config), layer))
    write_layout(root / "base", make_index(images), ref="3.11")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    _base(tmp_path)
    return tmp_path


def _ctx(root: Path, dist: str = "dist") -> BuildContext:
    env = {"SHIPYARD_CACHE_DIR": str(root / "cache")}
    return BuildContext(root, root / dist, Stamp("1.2.3", "abc123", False, EPOCH), "3.11", env)


def _action(root: Path, base: str | None = "oci-layout:base") -> Action:
    # Read-only mappings, as the manifest loader makes them.
    settings = ImageSettings(
        base=base,
        user="65532",
        workdir="/srv",
        env=MappingProxyType({"LOG_LEVEL": "info"}),
        labels=MappingProxyType({"team": "x"}),
    )
    return Action(
        "image:app",
        "image",
        ("app",),
        root / "src",
        PLATFORMS,
        ("wheel:src",),
        entrypoint="app.main:main",
        image=settings,
    )


def _deps(root: Path) -> tuple[Artifact, ...]:
    wheel = _wheel(root)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return (Artifact("wheel", "", "py3-none-any", wheel, digest, wheel.stat().st_size),)


def _names(layer: Layer) -> dict[str, int]:
    with tarfile.open(layer.path, "r:gz") as tar:
        return {m.name: m.mode for m in tar.getmembers() if m.isfile()}


def test_each_platform_gets_base_deps_and_app_layers_and_the_config(repo: Path) -> None:
    resolver = StandIn()
    outcome = wrapped(ImageBuilder(resolver)).run(_action(repo), _ctx(repo), _deps(repo))
    assert sorted(resolver.calls) == sorted(PLATFORMS)
    paths = {a.path.relative_to(repo).as_posix() for a in outcome.outputs}
    assert {"dist/images/app/index.json", "dist/images/app/oci-layout"} <= paths
    assert not any(p.endswith(".tar") for p in paths), "tarballs only on request"
    assert not list((repo / "dist" / "images").glob("*.tar"))
    found = read_layout(repo / "dist" / "images" / "app", [Platform.parse(p) for p in PLATFORMS])
    for platform, (image, _) in found.items():
        _, deps, app = image.layers
        assert _names(deps) == {
            "opt/shipyard/deps/site/dep/__init__.py": 0o644,
            f"opt/shipyard/deps/site/dep/_speed.{platform.architecture}.so": 0o644,
            "opt/shipyard/deps/site/dep-2.0.dist-info/RECORD": 0o644,
        }
        assert _names(app) == {
            "opt/app/bin/app": 0o755,
            "opt/app/site/app/__init__.py": 0o644,
            "opt/app/site/app/main.py": 0o644,
            "opt/app/site/app-1.2.3.dist-info/METADATA": 0o644,
            "opt/app/site/app-1.2.3.dist-info/RECORD": 0o644,
            "opt/app/site/app-1.2.3.dist-info/WHEEL": 0o644,
        }
        config = image.config
        assert config.entrypoint == ("/opt/app/bin/app",) and config.cmd is None
        assert (config.user, config.working_dir) == ("65532", "/srv")
        assert config.env == (
            "PATH=/usr/bin:/bin:/opt/app/bin",
            "LANG=C.UTF-8",
            "PYTHONPATH=/opt/app/site:/opt/shipyard/deps/site",
            "LOG_LEVEL=info",
        )
        labels = dict(config.labels)
        assert labels["team"] == "x"
        assert labels["org.opencontainers.image.revision"] == "abc123"
        assert labels["org.opencontainers.image.version"] == "1.2.3"
        assert labels["org.opencontainers.image.created"] == "2024-01-01T00:00:00Z"
        assert labels["org.opencontainers.image.source"] == "src"
        assert image.created == "2024-01-01T00:00:00Z"
        assert [h.created_by for h in image.history][-2:] == [
            "shipyard: third-party dependencies",
            "shipyard: app 1.2.3",
        ]
    layout = repo / "dist" / "images" / "app"
    (top,) = json.loads((layout / "index.json").read_bytes())["manifests"]
    # The layout's own entry: its name, and what the local copy was built from.
    assert top["annotations"]["org.opencontainers.image.ref.name"] == "1.2.3"
    assert set(top["annotations"]) == {
        "org.opencontainers.image.ref.name",
        "dev.shipyard.image.inputs",
    }
    blobs = layout / "blobs" / "sha256"
    index = json.loads((blobs / top["digest"][7:]).read_bytes())
    assert index["annotations"]["org.opencontainers.image.version"] == "1.2.3"
    assert "org.opencontainers.image.base.name" not in index["annotations"]
    assert "dev.shipyard.image.inputs" not in index["annotations"]  # pushed: content only
    manifest = json.loads((blobs / index["manifests"][0]["digest"][7:]).read_bytes())
    assert manifest["annotations"]["org.opencontainers.image.base.name"] == "oci-layout:base"
    assert manifest["annotations"]["org.opencontainers.image.base.digest"].startswith("sha256:")


def test_two_builds_give_identical_bytes(repo: Path) -> None:
    first = wrapped(ImageBuilder(StandIn())).run(_action(repo), _ctx(repo, "one"), _deps(repo))
    second = wrapped(ImageBuilder(StandIn())).run(_action(repo), _ctx(repo, "two"), _deps(repo))
    a = {x.path.relative_to(repo / "one").as_posix(): x.sha256 for x in first.outputs}
    b = {x.path.relative_to(repo / "two").as_posix(): x.sha256 for x in second.outputs}
    differ = sorted(n for n in a.keys() | b.keys() if a.get(n) != b.get(n))
    assert not differ, f"outputs differ between two builds: {differ}"
    assert first.inputs == second.inputs


@pytest.mark.parametrize("native", [False, True])
def test_only_platforms_with_equal_sites_share_layers(repo: Path, native: bool) -> None:
    wrapped(ImageBuilder(StandIn(native=native))).run(_action(repo), _ctx(repo), _deps(repo))
    found = read_layout(repo / "dist" / "images" / "app", [Platform.parse(p) for p in PLATFORMS])
    amd, arm = (image for image, _ in found.values())
    assert (amd.layers[1].descriptor == arm.layers[1].descriptor) is not native
    assert amd.layers[2].descriptor == arm.layers[2].descriptor, "the app layer is pure"


def test_missing_base_or_wheel_is_a_build_error(repo: Path) -> None:
    with pytest.raises(BuildError, match="no base image"):
        wrapped(ImageBuilder(StandIn())).run(_action(repo, base=None), _ctx(repo), _deps(repo))
    with pytest.raises(BuildError, match="no wheel"):
        wrapped(ImageBuilder(StandIn())).run(_action(repo), _ctx(repo), ())
    docker = dataclasses.replace(
        _action(repo), image=ImageSettings(base="oci-layout:base", dockerfile="D")
    )
    with pytest.raises(BuildError, match="Docker engine"):
        wrapped(ImageBuilder(StandIn())).run(docker, _ctx(repo), _deps(repo))
    with pytest.raises(BuildError, match="does not exist"):
        wrapped(ImageBuilder(StandIn())).run(
            _action(repo, "oci-layout:gone"), _ctx(repo), _deps(repo)
        )


def test_the_key_follows_settings_and_base_but_not_the_output_folder(repo: Path) -> None:
    builder = ImageBuilder(StandIn())
    key = wrapped(builder).key(_action(repo), _ctx(repo), _deps(repo))
    assert key == wrapped(builder).key(_action(repo), _ctx(repo, "elsewhere"), _deps(repo))
    other = wrapped(builder).key(
        _action(repo, "oci-layout:base,rootfs:x;linux/amd64"), _ctx(repo), ()
    )
    assert other != key
    retagged = _action(repo)
    assert retagged.image is not None
    pushed = dataclasses.replace(retagged.image, tags=("other",), hubs=("127.0.0.1:5000/x",))
    same = wrapped(builder).key(
        dataclasses.replace(retagged, image=pushed), _ctx(repo), _deps(repo)
    )
    assert same == key, "where an image is pushed does not change what is built"


def test_docker_archives_name_their_tags(repo: Path) -> None:
    wrapped(ImageBuilder(StandIn())).run(_action(repo), _ctx(repo), _deps(repo))
    tarball, _ = write_archive(repo / "dist", "app", "linux/arm64")
    assert tarball == repo / "dist" / "images" / "app-1.2.3-linux_arm64.tar"
    with tarfile.open(tarball) as tar:
        handle = tar.extractfile("manifest.json")
        assert handle is not None
        manifest = json.load(io.BytesIO(handle.read()))
    assert manifest[0]["RepoTags"] == ["app:1.2.3-arm64", "app:1.2.3-linux_arm64"]
