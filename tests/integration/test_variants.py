"""Image variants against the real engine, QEMU and the local registry (issue 15 item 3).

One binary with a `debug` variant (the debug base: the Python base plus busybox), a
`distroless` variant (no shell, no package manager) and a `same` variant equal to the
default, on linux/amd64 and linux/arm64, built from the bases scripts/services.sh
makes. Each variant runs with `--network none` on both platforms (arm64 under QEMU);
the distroless image has no /bin/sh, the debug one has busybox; `shipyard push` and a
release push them with suffixed tags that read back with the built digests.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from docker.errors import DockerException

from shipyard.oci.remote.registry import Registry
from tests.integration._images import tarball
from tests.integration.conftest import SERVICES_ENV, Services, read_env_file, require_services
from tests.tiny import GREETING, VERSION, make_repo, shipyard

pytestmark = pytest.mark.integration

PLATFORMS = ("linux/amd64", "linux/arm64")
VARIANTS = ("debug", "distroless", "same")


def _flavour_layout(services: Services, flavour: str) -> Path:
    """The flavour's base layout services.sh wrote (SHIPYARD_BASE_<FLAVOUR>_LAYOUT)."""
    key = f"SHIPYARD_BASE_{flavour.upper()}_LAYOUT"
    text = os.environ.get(key) or read_env_file(SERVICES_ENV).get(key)
    layout = Path(text) if text else Path(f"{services.base_layout}-{flavour}")
    if not (layout / "index.json").is_file():
        why = f"no {flavour} base layout at {layout}: run bash scripts/services.sh"
        if require_services():
            pytest.fail(why)
        pytest.skip(why)
    return layout


MANIFEST = """\
schema: 1
project: {{name: tiny, version: "{version}", python: "3.11"}}
binaries:
  tiny:
    source: tiny
    entrypoint: "tiny:main"
    outputs: [image]
    platforms: [linux/amd64, linux/arm64]
    image:
      base: "oci-layout:{base}"
      hubs: ["{hub}"]
      tags: [it]
      movable_tags: [it]  # the push test points it at the build; the release moves it
      env: {{FROM_IMAGE: "yes"}}
      variants:
        debug: {{base: "oci-layout:{debug}", env: {{TINY_DEBUG: "1"}}}}
        distroless: {{base: "oci-layout:{distroless}"}}
        same: {{env: {{FROM_IMAGE: "yes"}}}}
"""


@pytest.fixture(scope="module")
def built(
    tmp_path_factory: pytest.TempPathFactory, services: Services
) -> Iterator[tuple[Path, str, Path]]:
    """The tiny repository with variants, built once: (repo, hub, cache)."""
    folder = tmp_path_factory.mktemp("variants")
    hub = f"{services.registry}/it-variants-{uuid.uuid4().hex[:10]}"
    root = make_repo(folder / "repo", {"tiny": (f"oci-layout:{services.base_layout}", PLATFORMS)})
    (root / "binaries.yaml").write_text(
        MANIFEST.format(
            version=VERSION,
            base=services.base_layout,
            hub=hub,
            debug=_flavour_layout(services, "debug"),
            distroless=_flavour_layout(services, "distroless"),
        )
    )
    git = ["git", "-C", str(root), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "commit", "-qam", "variants"], check=True)
    cache = folder / "cache"
    done = shipyard(root, "build", "--output=image", cache=cache)
    assert done.returncode == 0, done.stderr
    yield root, hub, cache
    client = docker.DockerClient(base_url=services.docker_host)
    for variant in ("", *VARIANTS):
        for arch in ("amd64", "arm64"):
            suffix = f"-{variant}" if variant else ""
            for tag in (f"{VERSION}{suffix}-{arch}", f"{VERSION}{suffix}-linux_{arch}"):
                with contextlib.suppress(DockerException):
                    client.images.remove(f"tiny:{tag}", noprune=False)


def _digests(root: Path) -> dict[str, str]:
    """variant ("" for the default) -> index digest, from the layouts the build wrote."""
    layout = root / "dist" / "images" / "tiny"
    found = {}
    for variant in ("", *VARIANTS):
        folder = layout / "variants" / variant if variant else layout
        found[variant] = json.loads((folder / "index.json").read_text())["manifests"][0]["digest"]
    return found


def _load(client: docker.DockerClient, root: Path, variant: str, arch: str) -> str:
    suffix = f"-{variant}" if variant else ""
    with tarball(root / "dist", "tiny", f"linux/{arch}", variant).open("rb") as handle:
        client.images.load(handle)
    return f"tiny:{VERSION}{suffix}-{arch}"


def _run(
    client: docker.DockerClient, image: str, arch: str, *args: str, entrypoint: str | None = None
) -> str:
    """What the image prints, run with `--network none` as `arch` (arm64 under QEMU)."""
    out = client.containers.run(
        image,
        list(args),
        entrypoint=entrypoint,
        network_mode="none",
        remove=True,
        platform=f"linux/{arch}",
    )
    return bytes(out).decode().strip()


def _cannot_start(client: docker.DockerClient, image: str, arch: str, entrypoint: str) -> str:
    """The engine's error starting `entrypoint` in `image` (the test fails if it starts)."""
    name = f"it-variants-{uuid.uuid4().hex[:10]}"
    try:
        with pytest.raises(DockerException) as refused:
            _ = client.containers.run(
                image,
                [],
                entrypoint=entrypoint,
                name=name,
                network_mode="none",
                platform=f"linux/{arch}",
            )
    finally:  # a container the engine created but could not start
        with contextlib.suppress(DockerException):
            client.containers.get(name).remove(force=True)
    return str(refused.value)


@pytest.mark.requires("docker", "qemu-aarch64", "base-layout")
def test_each_variant_runs_on_both_platforms_as_its_base_promises(
    built: tuple[Path, str, Path], services: Services
) -> None:
    root, _, _ = built
    digests = _digests(root)
    assert digests["same"] == digests[""], "a variant equal to the default is the default"
    assert len({digests[""], digests["debug"], digests["distroless"]}) == 3
    # Builds write no tarball: each is written from its layout on request.
    assert not list((root / "dist" / "images").glob("*.tar"))
    client = docker.DockerClient(base_url=services.docker_host)
    for arch in ("amd64", "arm64"):  # arm64 under QEMU
        default = _load(client, root, "", arch)
        debug = _load(client, root, "debug", arch)
        distroless = _load(client, root, "distroless", arch)
        for image in (default, debug, distroless):
            assert _run(client, image, arch) == GREETING, image
        # No shell and no package manager in the distroless image: nothing to start.
        for missing in ("/bin/sh", "/usr/bin/bash", "/usr/bin/dpkg", "/usr/bin/apt-get"):
            assert "no such file" in _cannot_start(client, distroless, arch, missing).lower()
        assert _run(client, default, arch, "-c", "echo shell", entrypoint="/bin/sh") == "shell"
        # busybox and its applets (those the base lacks) in the debug image.
        assert _run(client, debug, arch, "echo", "bb", entrypoint="busybox") == "bb"
        dumped = _run(client, debug, arch, "-l", "4", "/usr/bin/python3", entrypoint="xxd")
        assert dumped.startswith("00000000: 7f45 4c46"), dumped  # the ELF magic
        # Its env merged over the image's.
        shown = _run(
            client,
            debug,
            arch,
            "-c",
            "import os; print(os.environ['TINY_DEBUG'], os.environ['FROM_IMAGE'])",
            entrypoint="python3",
        )
        assert shown == "1 yes"
        _cannot_start(client, default, arch, "busybox")


@pytest.mark.requires("registry")
def test_push_tags_every_variant_with_its_digest(
    built: tuple[Path, str, Path], services: Services
) -> None:
    root, hub, cache = built
    pushed = shipyard(root, "push", cache=cache)
    assert pushed.returncode == 0, pushed.stderr
    digests = _digests(root)
    client = Registry(services.registry)
    repo = f"{hub.partition('/')[2]}/tiny"
    for variant, digest in digests.items():
        tag = f"it-{variant}" if variant else "it"
        assert client.manifest_exists(repo, tag) == digest, tag
    assert client.manifest_exists(repo, "it-same") == client.manifest_exists(repo, "it")
    # Pushing again uploads nothing and moves no tag.
    again = shipyard(root, "push", cache=cache)
    assert again.returncode == 0, again.stderr
    assert "pushed" not in again.stderr and "tagged" not in again.stderr


@pytest.mark.requires("registry")
def test_a_release_stages_and_publishes_every_variant(
    built: tuple[Path, str, Path], services: Services
) -> None:
    root, hub, cache = built
    version = VERSION  # the tiny project's own (its wheel's) version
    done = shipyard(root, "release", f"--version={version}", cache=cache)
    assert done.returncode == 0, done.stderr
    staged = json.loads((root / "dist" / "release" / version / "release.json").read_text())
    images = {a.get("variant", ""): a for a in staged["artifacts"] if a["kind"] == "image"}
    assert set(images) == {"", *VARIANTS}
    assert images["debug"]["tags"] == [f"{version}-debug", "it-debug"]
    assert images["debug"]["path"] == "images/tiny/variants/debug"
    assert images["same"]["collapsed"] is True and images["debug"]["collapsed"] is False
    assert images["same"]["digest"] == images[""]["digest"]
    client = Registry(services.registry)
    repo = f"{hub.partition('/')[2]}/tiny"
    for art in images.values():
        for tag in art["tags"]:
            assert client.manifest_exists(repo, tag) == art["digest"], tag
    # The staged layouts read back: SHA256SUMS lists the variants' files too.
    sums = (root / "dist" / "release" / version / "SHA256SUMS").read_text()
    assert "images/tiny/variants/distroless/index.json" in sums
