"""Real images of the example binaries: built twice identical, loaded and run by Docker
(linux/arm64 under QEMU), read by skopeo, and built from a registry base and pushed.

Nothing leaves loopback: wheels and resolutions run with uv and pip offline (the
example binaries used here have no third-party dependencies), the base comes from
the services' OCI layout or their registry on 127.0.0.1.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.builders.image import ImageBuilder
from shipyard.builders.wheel import WheelBuilder
from shipyard.engine.plan import Action
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import BuildContext, Outcome
from shipyard.manifest import Binary, load_manifest
from shipyard.oci.layout import read_layout
from shipyard.oci.model import Platform, config_json
from shipyard.oci.remote.registry import Registry
from shipyard.stamp import Stamp
from shipyard.workspace import load_workspace
from tests.integration._images import tarball
from tests.integration.conftest import Services

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BINARIES = ("meshctl", "echo")
PLATFORMS = ("linux/amd64", "linux/arm64")
VERSION = "0.0.1.dev0+itest"
TAG = "0.0.1.dev0-itest"
OFFLINE = {"UV_OFFLINE": "1", "PIP_NO_INDEX": "1"}


def _binary(name: str) -> Binary:
    return load_manifest(REPO / "binaries.yaml", {}).binaries[name]


def _build(name: str, base: str, dist: Path, cache: Path) -> Outcome:
    env = {**os.environ, **OFFLINE, "SHIPYARD_CACHE_DIR": str(cache)}
    stamp = Stamp(VERSION, "0123456789abcdef0123456789abcdef01234567", False, 1704067200)
    workspace = load_workspace(REPO)
    ctx = BuildContext(REPO, dist, stamp, "3.11", env, workspace=workspace)
    binary = _binary(name)
    wheel_action = Action(f"wheel:{name}", "wheel", (name,), binary.source)
    wheel = wrapped(WheelBuilder()).run(wheel_action, ctx, ())
    # The in-repo libraries the binary's project needs (meshctl: mesh-api), as the plan adds.
    project = workspace.project_at(binary.source)
    assert project is not None
    libraries = [
        Action(f"wheel:{lib.key}", "wheel", (), lib.root, project=lib.key)
        for lib in workspace.closure(project.key)
    ]
    shipped = wheel.outputs + tuple(
        artifact
        for library in libraries
        for artifact in wrapped(WheelBuilder()).run(library, ctx, ()).outputs
    )
    action = Action(
        f"image:{name}",
        "image",
        (name,),
        binary.source,
        PLATFORMS,
        (wheel_action.id, *(library.id for library in libraries)),
        entrypoint=binary.entrypoint,
        image=dataclasses.replace(binary.image, base=base),
        project=project.key,
    )
    return wrapped(ImageBuilder()).run(action, ctx, shipped)


def _digests(outcome: Outcome, dist: Path) -> dict[str, str]:
    return {a.path.relative_to(dist).as_posix(): a.sha256 for a in outcome.outputs}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, timeout=300)


@pytest.fixture(scope="module")
def built(
    services: Services, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, Outcome]]:
    """Each binary built twice from the base layout, in two dist folders, one cache."""
    cache = tmp_path_factory.mktemp("cache")
    out: dict[str, tuple[Path, Outcome]] = {}
    for name in BINARIES:
        base = f"oci-layout:{services.base_layout}"
        dists = [tmp_path_factory.mktemp(f"dist-{name}-{n}") for n in (1, 2)]
        first, second = (_build(name, base, d, cache) for d in dists)
        a, b = _digests(first, dists[0]), _digests(second, dists[1])
        differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        assert not differ, f"{name}: these outputs differ between two builds: {differ}"
        out[name] = (dists[0], first)
    return out


@pytest.mark.requires("base-layout", "skopeo")
def test_skopeo_reads_a_two_platform_index_with_annotations(
    services: Services, built: dict[str, tuple[Path, Outcome]]
) -> None:
    for name, (dist, _) in built.items():
        layout = dist / "images" / name
        raw = _run("skopeo", "inspect", "--raw", f"oci:{layout}")
        assert raw.returncode == 0, raw.stderr
        index = json.loads(raw.stdout)
        platforms = sorted(m["platform"]["architecture"] for m in index["manifests"])
        assert platforms == ["amd64", "arm64"]
        assert index["annotations"]["org.opencontainers.image.version"] == VERSION
        for arch in ("amd64", "arm64"):
            config = _run("skopeo", "--override-arch", arch, "inspect", "--config", f"oci:{layout}")
            assert config.returncode == 0, config.stderr
            doc = json.loads(config.stdout)
            labels = doc["config"]["Labels"]
            assert labels["org.opencontainers.image.version"] == VERSION
            assert labels["org.opencontainers.image.revision"].startswith("0123456789")
            assert labels["org.opencontainers.image.created"] == "2024-01-01T00:00:00Z"
            assert labels["org.opencontainers.image.source"].startswith("examples/mesh/")
            assert doc["created"] == "2024-01-01T00:00:00Z"
            assert doc["config"]["Entrypoint"] == [f"/opt/{name}/bin/{name}"]


@pytest.fixture
def loaded(built: dict[str, tuple[Path, Outcome]]) -> Iterator[list[str]]:
    """The docker-archive tarballs loaded into Docker; their tags removed afterwards."""
    tags: list[str] = []
    try:
        for name, (dist, _) in built.items():
            for platform in PLATFORMS:
                suffix = platform.replace("/", "_")
                archive = tarball(dist, name, platform)
                done = _run("docker", "load", "--input", str(archive))
                assert done.returncode == 0, done.stderr
                assert f"{name}:{TAG}-{suffix}" in done.stdout
                tags += [f"{name}:{TAG}-{suffix}", f"{name}:{TAG}"]
        yield tags
    finally:
        for tag in dict.fromkeys(tags):
            _run("docker", "image", "rm", "--force", tag)


@pytest.mark.requires("base-layout", "docker", "qemu-aarch64")
def test_docker_runs_each_platform_and_it_prints_the_version(
    services: Services, built: dict[str, tuple[Path, Outcome]], loaded: list[str]
) -> None:
    for name in built:
        for platform in PLATFORMS:
            image = f"{name}:{TAG}-{platform.replace('/', '_')}"
            done = _run(
                "docker", "run", "--rm", "--network", "none", "--platform", platform, image,
                *_binary(name).smoke,
            )  # fmt: skip
            assert done.returncode == 0, f"{image}: {done.stderr}"
            assert VERSION in done.stdout, f"{image} printed {done.stdout!r}"
            arch = _run("docker", "image", "inspect", "--format", "{{.Architecture}}", image)
            assert arch.stdout.strip() == platform.split("/")[1]


def _push(registry: Registry, repo: str, layout: Path, tag: str) -> str:
    """A minimal push of a layout's index (blobs, manifests by digest, then the tag)."""
    blobs = layout / "blobs" / "sha256"
    (top,) = json.loads((layout / "index.json").read_bytes())["manifests"]
    index = json.loads((blobs / top["digest"][7:]).read_bytes())
    for entry in index["manifests"]:
        manifest = json.loads((blobs / entry["digest"][7:]).read_bytes())
        for desc in [manifest["config"], *manifest["layers"]]:
            path = blobs / desc["digest"][7:]
            registry.push_blob(repo, desc["digest"], desc["size"], path)
        data = (blobs / entry["digest"][7:]).read_bytes()
        registry.put_manifest(repo, entry["digest"], data, entry["mediaType"])
    data = (blobs / top["digest"][7:]).read_bytes()
    registry.put_manifest(repo, top["digest"], data, top["mediaType"])
    return registry.put_manifest(repo, tag, data, top["mediaType"])


@pytest.mark.requires("registry", "skopeo")
def test_a_registry_base_gives_the_same_image_and_it_pushes(
    services: Services, built: dict[str, tuple[Path, Outcome]], tmp_path: Path
) -> None:
    dist, _ = built["meshctl"]
    _build("meshctl", services.base_image, tmp_path / "dist", tmp_path / "cache")
    layout = tmp_path / "dist" / "images" / "meshctl"
    wanted = [Platform.parse(p) for p in PLATFORMS]
    ours = read_layout(layout, wanted)
    for platform, (image, _) in read_layout(dist / "images" / "meshctl", wanted).items():
        pulled = ours[platform][0]
        assert config_json(pulled) == config_json(image), f"{platform}: configs differ"
        assert [x.descriptor for x in pulled.layers] == [x.descriptor for x in image.layers]
    registry = Registry(services.registry, environ={})
    digest = _push(registry, "shipyard-test/meshctl", layout, TAG)
    remote = f"docker://{services.registry}/shipyard-test/meshctl:{TAG}"
    raw = _run("skopeo", "inspect", "--raw", "--tls-verify=false", remote)
    assert raw.returncode == 0, raw.stderr
    local = _run("skopeo", "inspect", "--raw", f"oci:{layout}")
    assert raw.stdout == local.stdout
    assert digest == json.loads((layout / "index.json").read_text())["manifests"][0]["digest"]
