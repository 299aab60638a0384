"""Shared by the release tests (test_release*.py): a two-binary example, two loopback
registries and a pypiserver.

The full release uses shipyard's real builders (wheels, zipapps, images from the
base layout) and smoke-runs zipapps and host-platform images. The tests that
exercise preflight and publish (twenty killed publishes among them) use a
stand-in image builder that writes small valid two-platform OCI layouts,
deterministic per binary and version, so each trial does not rebuild images.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from shipyard._fs import sha256_file
from shipyard.artifacts import ANY, ImageIndex, Metadata, PlatformManifest
from shipyard.builders.wheel import WheelBuilder
from shipyard.engine.keys import ActionKey, Inputs
from shipyard.engine.plan import Action
from shipyard.engine.scheduler import Artifact, BuildContext, Builder
from shipyard.oci.remote.auth import Credentials
from shipyard.oci.remote.registry import Registry
from shipyard.release import (
    ReleaseContext,
    ReleaseOptions,
    prepare_release,
)
from tests.integration.conftest import Services
from tests.integration.faultproxy import FaultProxy
from tests.integration.pypi import package_index
from tests.integration.registries import (
    PASSWORD,
    USER,
    ExtraRegistry,
    running_registry,
    write_htpasswd,
)
from tests.integration.test_push import make_layout

REPO = Path(__file__).resolve().parents[2]

INDEX_USER, INDEX_PASSWORD = "uploader", "index-secret-7"

PLATFORMS = ("linux/amd64", "linux/arm64")

# The shared registry outlives a test run: every run pushes under its own prefix.
RUN = uuid.uuid4().hex[:8]


class LayoutImageBuilder:
    """Stand-in for the image builder: a two-platform layout in dist/images/<binary>/."""

    kind = "image"

    def inputs(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Inputs:
        return {"id": action.id, "version": ctx.stamp.version}

    def build(
        self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], key: ActionKey
    ) -> tuple[Artifact, ...]:
        layout = ctx.dist / "images" / action.binaries[0]
        shutil.rmtree(layout, ignore_errors=True)
        make_layout(layout, action.platforms, f"{action.id}@{ctx.stamp.version}")
        index = layout / "index.json"
        about = _index_of(layout)
        metadata = Metadata(installed=(), image=about)  # a stand-in installs nothing
        size = index.stat().st_size
        binary = action.binaries[0]
        return (Artifact("image", binary, ANY, index, sha256_file(index), size, metadata),)


def _index_of(layout: Path) -> ImageIndex:
    """What the image builder reports of a layout: the root and each platform's manifest."""
    (root,) = json.loads((layout / "index.json").read_bytes())["manifests"]

    def blob(digest: str) -> bytes:
        return (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()

    manifests = []
    for child in json.loads(blob(root["digest"])).get("manifests", []):
        plat = child["platform"]
        name = "/".join(p for p in (plat["os"], plat["architecture"], plat.get("variant")) if p)
        manifests.append(PlatformManifest(name, child["digest"], child["size"]))
    return ImageIndex(root["digest"], root["mediaType"], root["size"], tuple(manifests))


BUILDERS: dict[str, Builder] = {"wheel": WheelBuilder(), "image": LayoutImageBuilder()}

MANIFEST = """\
schema: 1
project: {name: mesh, version: git, python: "3.11"}
defaults:
  outputs: [wheel, image]
  platforms: [linux/amd64, linux/arm64]
  image:
    hubs: ["${HUB_A}", "${HUB_B}"]
    tags: [latest]
binaries:
  meshctl: {source: ctl, entrypoint: "meshctl.cli:main"}
  mesh-agent: {source: agent, entrypoint: "meshagent.main:main"}
"""

# The real thing: wheels, zipapps and images, smoke-run in validate.
REAL_MANIFEST = """\
schema: 1
project: {name: mesh, version: git, python: "3.11"}
defaults:
  outputs: [wheel, zipapp, image]
  platforms: [linux/amd64, linux/arm64]
  smoke: [--version]
  image:
    base: "oci-layout:${BASE_LAYOUT}"
    hubs: ["${HUB_A}", "${HUB_B}"]
    tags: [latest]
binaries:
  meshctl: {source: ctl, entrypoint: "meshctl.cli:main"}
  mesh-agent: {source: agent, entrypoint: "meshagent.main:main"}
"""


@dataclass(frozen=True)
class PackageServer:
    """A running pypiserver: upload URL and where its packages land."""

    url: str
    packages: Path


@dataclass(frozen=True)
class Hubs:
    """The two registries: the shared one and one that requires basic auth."""

    open: str
    basic: ExtraRegistry


@pytest.fixture(scope="module")
def pypiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PackageServer]:
    folder = tmp_path_factory.mktemp("pypiserver")
    with package_index(folder, INDEX_USER, INDEX_PASSWORD) as url:
        yield PackageServer(url, folder / "packages")


@pytest.fixture(scope="module")
def hubs(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hubs]:
    folder = tmp_path_factory.mktemp("release-registry")
    write_htpasswd(folder / "htpasswd", USER, PASSWORD)
    with running_registry(folder / "registry", htpasswd=folder / "htpasswd") as basic:
        yield Hubs(services.registry, basic)


def make_repo(target: Path, manifest: str = MANIFEST) -> Path:
    """A git repository with the meshctl and mesh-agent examples, the in-repo libraries they
    use (found by name: the copy has no uv workspace) and the manifest."""
    for name in ("ctl", "agent", "libs/api", "libs/config"):
        shutil.copytree(REPO / "examples" / "mesh" / name, target / name)
    (target / "binaries.yaml").write_text(manifest)
    (target / ".gitignore").write_text("/dist/\n")
    git = ["git", "-C", str(target), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "mesh: first"], check=True)
    (target / "ctl" / "NOTES.txt").write_text("second\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "ctl: notes"], check=True)
    return target


def release_env(hubs: Hubs, index: PackageServer, prefix: str) -> dict[str, str]:
    """The environment a release runs in: hubs, registry and index credentials."""
    user_var = "SHIPYARD_REGISTRY_" + hubs.basic.host.replace(".", "_").replace(":", "_")
    return {
        **os.environ,
        "HUB_A": f"{hubs.open}/{prefix}",
        "HUB_B": f"{hubs.basic.host}/{prefix}",
        f"{user_var}_USER": USER,
        f"{user_var}_PASSWORD": PASSWORD,
        "SHIPYARD_INDEX_URL": index.url,
        "SHIPYARD_INDEX_USER": INDEX_USER,
        "SHIPYARD_INDEX_PASSWORD": INDEX_PASSWORD,
    }


def context(
    repo: Path,
    env: Mapping[str, str],
    options: ReleaseOptions,
    lines: list[str] | None = None,
    builders: Mapping[str, Builder] = BUILDERS,
) -> ReleaseContext:
    """A release context for `repo`, by default with the stand-in image builder."""
    return prepare_release(
        repo / "binaries.yaml",
        options,
        env=env,
        builders=builders,
        on_step=(lines.append if lines is not None else lambda _: None),
    )


def tag_digests(hubs: Hubs, prefix: str, tags: tuple[str, ...]) -> dict[str, str | None]:
    """image:tag -> digest (None when absent) on both hubs."""
    found: dict[str, str | None] = {}
    for host, creds in ((hubs.open, None), (hubs.basic.host, Credentials(USER, PASSWORD))):
        client = Registry(host, credentials=creds)
        for binary in ("meshctl", "mesh-agent"):
            for tag in tags:
                found[f"{host}/{prefix}/{binary}:{tag}"] = client.manifest_exists(
                    f"{prefix}/{binary}", tag
                )
    return found


def index_files(index: PackageServer) -> set[str]:
    """The files the package index holds."""
    return {p.name for p in index.packages.iterdir()}


def _no_wheels(repo: Path) -> bool:
    return not list((repo / "dist").rglob("*.whl"))


RUNNER = """
import json, sys
from pathlib import Path
from shipyard.release import ReleaseOptions, prepare_release, release
from tests.integration._release import BUILDERS
ctx = prepare_release(
    Path(sys.argv[1]) / "binaries.yaml", ReleaseOptions(version=sys.argv[2]),
    builders=BUILDERS, on_step=lambda line: print(line, flush=True),
)
release(ctx)
"""

_REFUSED = json.dumps({"errors": [{"code": "MANIFEST_INVALID", "message": "refused"}]}).encode()


def _after(count: int, method: str, part: str) -> Callable[[str, str], bool]:
    """A proxy match refusing `method` requests with `part` in their path after `count` pass."""
    seen = [0]

    def match(got: str, path: str) -> bool:
        if got != method or part not in path:
            return False
        seen[0] += 1
        return seen[0] > count

    return match


def _tags_on(host: str, prefixes: tuple[str, ...], tags: tuple[str, ...]) -> dict[str, str | None]:
    """prefix/binary:tag -> digest (None when absent) on the registry at `host`."""
    client = Registry(host)
    return {
        f"{prefix}/{binary}:{tag}": client.manifest_exists(f"{prefix}/{binary}", tag)
        for prefix in prefixes
        for binary in ("meshctl", "mesh-agent")
        for tag in tags
    }


def _sent(*proxies: FaultProxy) -> int:
    """Uploads through `proxies`: every PUT and PATCH (blobs, manifests, tags)."""
    return sum(p.count("PUT") + p.count("PATCH") for p in proxies)


FAILURES = ("hub-b-manifest", "hub-b-blob", "index-upload")
