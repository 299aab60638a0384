"""Real zipapps of the example suite and of a PyPI application: built twice, run here and
under QEMU in the arm64 base image."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import types
import urllib.request
import zipfile
from pathlib import Path

import pytest

from shipyard.builders.wheel import WheelBuilder
from shipyard.builders.zipapp import ZipappBuilder, ZipappOptions
from shipyard.engine.plan import Action, Selection, make_plan
from shipyard.engine.planning import read_workspace
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import BuildContext, Result, run_plan
from shipyard.manifest import Manifest, load_manifest
from shipyard.stamp import Stamp, read_stamp
from tests.integration._repo import clone, copy_worktree
from tests.integration.conftest import Services

pytestmark = pytest.mark.integration

# Binary -> the program name its --version prints.
EXAMPLES = {
    "mesh-agent": "mesh-agent",
    "meshctl": "meshctl",
    "mesh-discovery": "mesh-discovery",
    "echo": "mesh-echo",
    "mesh-cni": "mesh-cni",
}
PLATFORMS = ("linux/amd64", "linux/arm64")


@dataclasses.dataclass(frozen=True)
class Build:
    """One build of some binaries' wheels and zipapps."""

    stamp: Stamp
    results: list[Result]

    def zipapps(self) -> dict[str, Path]:
        """The zipapps by file name."""
        return {
            a.path.name: a.path
            for r in self.results
            for a in r.outputs
            if r.action.kind == "zipapp"
        }


def _with_zipapps(manifest: Manifest) -> Manifest:
    binaries = {
        name: dataclasses.replace(b, outputs=("wheel", "zipapp"), platforms=PLATFORMS)
        for name, b in manifest.binaries.items()
    }
    return dataclasses.replace(manifest, binaries=types.MappingProxyType(binaries))


def build(root: Path, names: tuple[str, ...]) -> Build:
    """Build the wheels and zipapps of `names` in the repository at `root` into root/dist."""
    manifest = _with_zipapps(load_manifest(root / "binaries.yaml"))
    stamp = read_stamp(root, manifest.project.version, os.environ)
    # The repository's projects: the example apps install their in-repo libraries' wheels.
    workspace = read_workspace(manifest)
    ctx = BuildContext(
        root,
        root / "dist",
        stamp,
        manifest.project.python,
        dict(os.environ),
        workspace=workspace,
    )

    def options(action: Action) -> ZipappOptions:
        return ZipappOptions(manifest.binaries[action.binaries[0]].entrypoint)

    plan = make_plan(manifest, Selection(binaries=names), workspace=workspace)
    builders = {"wheel": wrapped(WheelBuilder()), "zipapp": wrapped(ZipappBuilder(options))}
    results = run_plan(plan, ctx, builders)
    assert [(r.action.id, r.status) for r in results if r.status != "built"] == [], [
        r.reason for r in results
    ]
    return Build(stamp, results)


def run(pyz: Path, *args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    """Run a zipapp with the interpreter running the tests, caching under `cache`."""
    env = {**os.environ, "SHIPYARD_ZIPAPP_ROOT": str(cache)}
    return subprocess.run(
        [sys.executable, str(pyz), *args], env=env, capture_output=True, text=True, check=False
    )


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """The example suite's zipapps, built once from a fresh copy of this work tree."""
    return build(copy_worktree(tmp_path_factory.mktemp("repo")), tuple(EXAMPLES))


def _name(binary: str, version: str, platform: str | None = None) -> str:
    return f"{binary}-{version}" + (f"-{platform.replace('/', '_')}" if platform else "") + ".pyz"


def test_pure_examples_are_universal_and_mesh_agent_is_per_platform(examples: Build) -> None:
    version = examples.stamp.version
    expected = {_name(b, version) for b in EXAMPLES if b != "mesh-agent"}
    expected |= {_name("mesh-agent", version, p) for p in PLATFORMS}
    assert set(examples.zipapps()) == expected
    with zipfile.ZipFile(examples.zipapps()[_name("mesh-agent", version, "linux/arm64")]) as z:
        sos = [n for n in z.namelist() if n.endswith(".so")]
    assert sos and all("aarch64" in n for n in sos), sos


def test_every_zipapp_for_this_machine_prints_its_build_info(
    examples: Build, tmp_path: Path
) -> None:
    stamp = examples.stamp
    assert stamp.revision
    for binary, program in EXAMPLES.items():
        platform = "linux/amd64" if binary == "mesh-agent" else None
        pyz = examples.zipapps()[_name(binary, stamp.version, platform)]
        done = run(pyz, "--version", cache=tmp_path / "cache")
        assert done.returncode == 0, done.stderr
        assert done.stdout == (
            f"{program} {stamp.version} (rev {stamp.revision[:7]}, built {stamp.created})\n"
        )


def test_mesh_agent_loads_its_native_yaml_from_the_unpacked_copy(
    examples: Build, tmp_path: Path
) -> None:
    pyz = examples.zipapps()[_name("mesh-agent", examples.stamp.version, "linux/amd64")]
    for _ in range(2):  # cold, then warm
        done = run(pyz, "--once", cache=tmp_path / "cache")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["yaml_native"] is True
    (build_dir,) = (tmp_path / "cache").iterdir()
    assert list((build_dir / "site" / "yaml").glob("_yaml.cpython-311-x86_64-linux-gnu.so"))


def _differing_entry(a: Path, b: Path) -> str:
    with zipfile.ZipFile(a) as left, zipfile.ZipFile(b) as right:
        lnames, rnames = left.namelist(), right.namelist()
        if lnames != rnames:
            return f"entry lists differ: {sorted(set(lnames) ^ set(rnames)) or 'order'}"
        for name in lnames:
            li, ri = left.getinfo(name), right.getinfo(name)
            if left.read(name) != right.read(name) or (li.date_time, li.external_attr) != (
                ri.date_time,
                ri.external_attr,
            ):
                return name
    return "the shebang or zip metadata only"


def test_a_rebuild_in_another_clone_is_byte_identical(
    examples: Build, tmp_path_factory: pytest.TempPathFactory
) -> None:
    first = examples.zipapps()
    source = next(iter(first.values())).parents[2]
    again = build(clone(source, tmp_path_factory.mktemp("again") / "repo"), tuple(EXAMPLES))
    assert again.stamp == examples.stamp
    second = again.zipapps()
    assert set(second) == set(first)
    for name, path in first.items():
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert hashlib.sha256(second[name].read_bytes()).hexdigest() == digest, (
            f"{name} differs between builds at {_differing_entry(path, second[name])}"
        )


BLACK_PROJECT = """\
[build-system]
requires = ["hatchling>=1.21"]
build-backend = "hatchling.build"

[project]
name = "black-app"
version = "1.0.0"
dependencies = ["black"]

[tool.hatch.build.targets.wheel]
bypass-selection = true
"""
BLACK_MANIFEST = """\
schema: 1
project: {name: tools, version: "1.0.0", python: "3.11"}
binaries:
  black:
    source: app
    entrypoint: black:patched_main
"""


def test_a_pypi_application_with_native_wheels_becomes_a_working_zipapp(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "pyproject.toml").write_text(BLACK_PROJECT)
    (tmp_path / "binaries.yaml").write_text(BLACK_MANIFEST)
    built = build(tmp_path, ("black",)).zipapps()
    # black ships mypyc-compiled wheels: one zipapp per platform.
    assert set(built) == {_name("black", "1.0.0", p) for p in PLATFORMS}
    pyz = built[_name("black", "1.0.0", "linux/amd64")]
    shown = run(pyz, "--version", cache=tmp_path / "cache")
    assert shown.returncode == 0, shown.stderr
    assert "(compiled: yes)" in shown.stdout
    env = {**os.environ, "SHIPYARD_ZIPAPP_ROOT": str(tmp_path / "cache")}
    formatted = subprocess.run(
        [sys.executable, str(pyz), "-q", "-"],
        input="x=[1,2 ,3]\n",
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (formatted.returncode, formatted.stdout) == (0, "x = [1, 2, 3]\n"), formatted.stderr


def _arm64_digest(services: Services) -> str:
    """The arm64 manifest of the multi-arch base image, so running it moves no local tag."""
    repository, _, tag = services.base_image.partition("/")[2].rpartition(":")
    request = urllib.request.Request(
        f"{services.registry_url}/v2/{repository}/manifests/{tag}",
        headers={
            "Accept": "application/vnd.oci.image.index.v1+json,"
            "application/vnd.docker.distribution.manifest.list.v2+json"
        },
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only
    with opener.open(request, timeout=30) as response:
        index = json.load(response)
    return next(
        str(m["digest"])
        for m in index["manifests"]
        if m.get("platform", {}).get("architecture") == "arm64"
    )


@pytest.mark.requires("registry", "docker", "qemu-aarch64")
def test_the_arm64_zipapps_run_in_the_arm64_base_image(examples: Build, services: Services) -> None:
    import docker  # type: ignore[import-untyped, unused-ignore]
    import docker.errors  # type: ignore[import-untyped, unused-ignore]

    version = examples.stamp.version
    folder = examples.zipapps()[_name("meshctl", version)].parent
    image = services.base_image.rpartition(":")[0] + "@" + _arm64_digest(services)
    client = docker.DockerClient(base_url=services.docker_host, timeout=300)
    try:
        client.images.pull(image, platform="linux/arm64")

        def run_arm64(name: str, *args: str) -> str:
            output = client.containers.run(
                image,
                ["python3", f"/app/{name}", *args],
                remove=True,
                network_mode="none",
                platform="linux/arm64",
                volumes={str(folder): {"bind": "/app", "mode": "ro"}},
                environment={"SHIPYARD_ZIPAPP_ROOT": "/tmp/zipapps"},
            )
            return bytes(output).decode()

        agent = run_arm64(_name("mesh-agent", version, "linux/arm64"), "--once")
        assert json.loads(agent)["yaml_native"] is True
        assert run_arm64(_name("meshctl", version), "--version").startswith(f"meshctl {version}")
        with pytest.raises(docker.errors.ContainerError) as refused:
            run_arm64(_name("mesh-agent", version, "linux/amd64"), "--once")
        assert refused.value.exit_status == 2
        stderr = refused.value.stderr  # bytes at run time, whatever the stubs say
        text = stderr.decode() if isinstance(stderr, bytes) else str(stderr)
        assert "this machine is linux/arm64; use mesh-agent-" in text
    finally:
        client.close()
