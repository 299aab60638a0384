"""The services that scripts/services.sh starts are there and do what the tests rely on."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Services, require_services

try:
    import docker  # type: ignore[import-untyped, unused-ignore]
    import docker.errors  # type: ignore[import-untyped, unused-ignore]
    import requests
except ImportError as exc:  # pragma: no cover - depends on the environment
    if require_services():
        raise
    pytest.skip(f"python package {exc.name!r} is not installed", allow_module_level=True)

PLATFORMS = [("linux", "amd64"), ("linux", "arm64")]
INDEX_TYPES = {
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
}
MANIFEST_TYPES = {
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
}


def skopeo_raw(ref: str) -> bytes:
    """The raw manifest (or index) of a registry image."""
    proc = subprocess.run(
        ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{ref}"],
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc.stdout


def platforms(index: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((m["platform"]["os"], m["platform"]["architecture"]) for m in index["manifests"])


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def load_json(data: bytes) -> dict[str, Any]:
    value = json.loads(data)
    assert isinstance(value, dict)
    return value


@pytest.fixture
def docker_client(services: Services) -> Iterator[docker.DockerClient]:
    # Function-scoped so that it comes after the service check (autouse, same scope).
    client = docker.from_env(environment={**os.environ, "DOCKER_HOST": services.docker_host})
    yield client
    client.close()


@pytest.mark.requires("registry")
def test_registry_answers_v2(services: Services) -> None:
    with requests.Session() as session:
        session.trust_env = False  # loopback only, never through a proxy
        response = session.get(f"{services.registry_url}/v2/", timeout=5)
    assert response.status_code == 200
    assert response.headers.get("Docker-Distribution-Api-Version") == "registry/2.0"


@pytest.mark.requires("registry", "skopeo")
def test_base_image_is_a_two_platform_index(services: Services) -> None:
    index = load_json(skopeo_raw(services.base_image))
    assert index.get("mediaType") in INDEX_TYPES
    assert len(index["manifests"]) == 2
    assert platforms(index) == PLATFORMS
    for entry in index["manifests"]:
        assert entry["mediaType"] in MANIFEST_TYPES


@pytest.mark.requires("registry", "skopeo")
def test_per_arch_tags_are_the_index_entries(services: Services) -> None:
    index = load_json(skopeo_raw(services.base_image))
    by_arch = {m["platform"]["architecture"]: m["digest"] for m in index["manifests"]}
    for arch, digest in by_arch.items():
        assert sha256_digest(skopeo_raw(f"{services.base_image}-{arch}")) == digest


@pytest.mark.requires("base-layout")
def test_oci_layout_holds_both_platforms(services: Services) -> None:
    layout = services.base_layout
    assert load_json((layout / "oci-layout").read_bytes())["imageLayoutVersion"] == "1.0.0"

    def blob(digest: str) -> bytes:
        algorithm, _, hexdigest = digest.partition(":")
        data = (layout / "blobs" / algorithm / hexdigest).read_bytes()
        assert sha256_digest(data) == digest
        return data

    top = load_json((layout / "index.json").read_bytes())
    indexes = [m for m in top["manifests"] if m["mediaType"] in INDEX_TYPES]
    assert len(indexes) == 1, top
    index = load_json(blob(indexes[0]["digest"]))
    assert platforms(index) == PLATFORMS
    for entry in index["manifests"]:
        manifest = load_json(blob(entry["digest"]))
        config = load_json(blob(manifest["config"]["digest"]))
        assert config["architecture"] == entry["platform"]["architecture"]
        assert config["config"]["Cmd"] == ["python3"]
        for layer in manifest["layers"]:
            path = layout / "blobs" / Path(*layer["digest"].split(":", 1))
            assert path.stat().st_size == layer["size"]


@pytest.mark.requires("registry", "skopeo", "base-layout")
def test_oci_layout_matches_the_registry(services: Services) -> None:
    top = load_json((services.base_layout / "index.json").read_bytes())
    digests = {m["digest"] for m in top["manifests"]}
    assert sha256_digest(skopeo_raw(services.base_image)) in digests


@pytest.mark.parametrize(
    ("platform", "machine"),
    [
        pytest.param("linux/amd64", "x86_64", marks=pytest.mark.requires("registry", "docker")),
        pytest.param(
            "linux/arm64",
            "aarch64",
            marks=pytest.mark.requires("registry", "docker", "qemu-aarch64"),
        ),
    ],
)
def test_base_image_runs_on_each_platform(
    services: Services, docker_client: docker.DockerClient, platform: str, machine: str
) -> None:
    repository, _, tag = services.base_image.rpartition(":")
    image = docker_client.images.pull(repository, tag=tag, platform=platform)
    assert image.attrs["Architecture"] == platform.split("/")[1]
    output = docker_client.containers.run(
        image,
        ["python3", "-c", "import platform;print(platform.machine())"],
        network_mode="none",
        platform=platform,
        remove=True,
    )
    assert isinstance(output, bytes)
    assert output.decode().strip() == machine


@pytest.mark.requires("registry", "docker")
def test_base_image_has_the_full_stdlib(
    services: Services, docker_client: docker.DockerClient
) -> None:
    repository, _, tag = services.base_image.rpartition(":")
    image = docker_client.images.pull(repository, tag=tag, platform="linux/amd64")
    assert image.attrs["Config"]["Cmd"] == ["python3"]
    code = "import http.server, json, ssl, sqlite3, zlib, venv; print(ssl.OPENSSL_VERSION)"
    output = docker_client.containers.run(
        image, ["python3", "-c", code], network_mode="none", remove=True
    )
    assert isinstance(output, bytes)
    assert output.decode().startswith("OpenSSL")
