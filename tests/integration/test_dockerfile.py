"""image.dockerfile: the Docker engine builds each platform; shipyard writes one index."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import docker
import pytest

from tests.integration._images import tarball
from tests.integration._repo import copy_worktree, shipyard
from tests.integration.conftest import Services

pytestmark = [pytest.mark.integration, pytest.mark.requires("docker", "registry", "qemu-aarch64")]


def test_dockerfile_image_has_both_platforms_and_runs_on_each(
    tmp_path: Path, services: Services
) -> None:
    root = copy_worktree(tmp_path / "repo")
    done = shipyard(
        root,
        "build",
        "--binary=echo-docker",
        "--output=image",
        "--no-cache",
        DOCKER_HOST=services.docker_host,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads((root / "dist" / "report.json").read_text())
    version = report["version"]
    layout = root / "dist" / "images" / "echo-docker"
    raw = subprocess.run(
        ["skopeo", "inspect", "--raw", f"oci:{layout}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    platforms = sorted(
        f"{m['platform']['os']}/{m['platform']['architecture']}"
        for m in json.loads(raw)["manifests"]
    )
    assert platforms == ["linux/amd64", "linux/arm64"]
    client = docker.DockerClient(base_url=services.docker_host)
    for arch, machine in (("amd64", "x86_64"), ("arm64", "aarch64")):
        with tarball(root / "dist", "echo-docker", f"linux/{arch}").open("rb") as handle:
            loaded = client.images.load(handle.read())
        assert len({i.id for i in loaded}) == 1, loaded  # one image, tagged twice
        image = loaded[0]
        output = client.containers.run(
            image, ["--version"], network_mode="none", remove=True, platform=f"linux/{arch}"
        )
        assert output.decode().split()[:2] == ["mesh-echo", version]
        arch_seen = client.containers.run(
            image,
            [],
            entrypoint=["python3", "-c", "import platform;print(platform.machine())"],
            network_mode="none",
            remove=True,
            platform=f"linux/{arch}",
        )
        assert arch_seen.decode().strip() == machine
