"""Images through registries: pushed with `shipyard push`, pulled and run by docker on
both platforms; bases pulled from registries with basic auth and with a private CA."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.integration._repo import copy_worktree, shipyard
from tests.integration.conftest import Services
from tests.integration.registries import ExtraRegistries, extra_registries

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def registries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExtraRegistries]:
    """Basic-auth and TLS registries of our own on free loopback ports."""
    with extra_registries(tmp_path_factory.mktemp("registries")) as found:
        yield found


def _env_var(host: str) -> str:
    return "SHIPYARD_REGISTRY_" + "".join(c if c.isalnum() else "_" for c in host).upper()


@pytest.mark.requires("registry", "docker", "qemu-aarch64", "base-layout")
def test_pushed_image_pulls_and_runs_on_each_platform(tmp_path: Path, services: Services) -> None:
    root = copy_worktree(tmp_path / "repo")
    hub = f"{services.registry}/it-{uuid.uuid4().hex[:10]}"
    env = {"BASE_IMAGE": f"oci-layout:{services.base_layout}", "HUB": hub}
    built = shipyard(root, "build", "--binary=meshctl", "--output=image", "--no-cache", **env)
    assert built.returncode == 0, built.stderr
    version = json.loads((root / "dist" / "report.json").read_text())["version"]
    pushed = shipyard(root, "push", "--binary=meshctl", "--tag=it", **env)
    assert pushed.returncode == 0, pushed.stderr
    client = docker.DockerClient(base_url=services.docker_host)
    for arch, machine in (("amd64", "x86_64"), ("arm64", "aarch64")):
        image = client.images.pull(f"{hub}/meshctl", tag="it", platform=f"linux/{arch}")
        shown = client.containers.run(
            image, ["--version"], network_mode="none", remove=True, platform=f"linux/{arch}"
        )
        assert shown.decode().split()[:2] == ["meshctl", version]
        seen = client.containers.run(
            image,
            [],
            entrypoint=["python3", "-c", "import platform; print(platform.machine())"],
            network_mode="none",
            remove=True,
            platform=f"linux/{arch}",
        )
        assert seen.decode().strip() == machine
        client.images.remove(str(image.id), force=True)


def _copy_base(services: Services, target: str, *flags: str) -> None:
    subprocess.run(
        [
            "skopeo",
            "copy",
            "--quiet",
            "--all",
            "--src-tls-verify=false",
            *flags,
            f"docker://{services.base_image}",
            f"docker://{target}",
        ],
        check=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.requires("registry", "skopeo")
def test_bases_from_basic_auth_and_private_ca_registries(
    tmp_path: Path, services: Services, registries: ExtraRegistries
) -> None:
    root = copy_worktree(tmp_path / "repo")
    basic, tls = registries.basic, registries.tls
    assert basic.username and basic.password and tls.ca_file
    creds = f"{basic.username}:{basic.password}"
    _copy_base(
        services, f"{basic.host}/base:3.11", f"--dest-creds={creds}", "--dest-tls-verify=false"
    )
    _copy_base(services, f"{tls.host}/base:3.11", "--dest-tls-verify=false")  # set-up only
    build = ("build", "--binary=meshctl", "--output=image", "--no-cache")
    no_config = {"DOCKER_CONFIG": str(tmp_path / "empty-docker-config")}
    user = _env_var(basic.host)
    good = shipyard(
        root,
        *build,
        BASE_IMAGE=f"{basic.host}/base:3.11",
        **no_config,
        **{f"{user}_USER": basic.username, f"{user}_PASSWORD": basic.password},
    )
    assert good.returncode == 0, good.stderr
    wrong = shipyard(
        root,
        *build,
        BASE_IMAGE=f"{basic.host}/base:3.11",
        **no_config,
        **{f"{user}_USER": basic.username, f"{user}_PASSWORD": "not-the-password"},
    )
    assert wrong.returncode == 2, wrong.stderr
    assert "not-the-password" not in wrong.stderr + wrong.stdout
    assert basic.host in wrong.stderr
    report = (root / "dist" / "report.json").read_text()
    assert "not-the-password" not in report
    untrusted = shipyard(root, *build, BASE_IMAGE=f"{tls.host}/base:3.11", **no_config)
    assert untrusted.returncode != 0 and "ca.crt" in untrusted.stderr, untrusted.stderr
    certs = Path("/etc/docker/certs.d") / tls.host
    certs.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copy(tls.ca_file, certs / "ca.crt")
        trusted = shipyard(root, *build, BASE_IMAGE=f"{tls.host}/base:3.11", **no_config)
        assert trusted.returncode == 0, trusted.stderr
    finally:
        shutil.rmtree(certs, ignore_errors=True)
    assert os.environ.get("DOCKER_CONFIG") != no_config["DOCKER_CONFIG"]
