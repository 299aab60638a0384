"""Registry bases in either family of media types: pushed by `docker push`, copied by
`skopeo copy --format v2s2` and by `skopeo copy --format oci`; each is the base of a
small binary, `shipyard build --output=image` succeeds and the image runs.

A Docker schema 2 image's config (`application/vnd.docker.container.image.v1+json`)
is a blob: it used to be requested from /manifests/, which the registry answers with
500, so a base pushed by docker could not be built on (issue 13).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.oci import mediatypes
from tests.integration._images import tarball
from tests.integration.conftest import Services
from tests.tiny import GREETING, VERSION, make_repo, shipyard

pytestmark = pytest.mark.integration

AMD64 = "linux/amd64"


def _run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL, env=env
    )


def _raw(ref: str) -> dict[str, object]:
    done = _run("skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{ref}")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert isinstance(doc, dict)
    return doc


def _child(ref: str, doc: dict[str, object]) -> dict[str, object]:
    """The linux/amd64 manifest of `ref` (itself if it is one)."""
    if not mediatypes.is_index(str(doc.get("mediaType", mediatypes.OCI_INDEX))):
        return doc
    entries = doc["manifests"]
    assert isinstance(entries, list)
    (amd,) = [e for e in entries if e["platform"]["architecture"] == "amd64"]
    return _raw(f"{ref.rpartition(':')[0]}@{amd['digest']}")


@pytest.fixture(scope="module")
def bases(services: Services) -> Iterator[dict[str, str]]:
    """Three registry bases of the services' Python image, under a unique prefix."""
    prefix = f"{services.registry}/mt-{uuid.uuid4().hex[:10]}"
    source = f"oci:{services.base_layout}:3.11"
    env = {"DOCKER_HOST": services.docker_host, "PATH": "/usr/local/bin:/usr/bin:/bin"}
    pushed = f"{prefix}/docker-push:1"
    refs = {"docker": pushed, "v2s2": f"{prefix}/v2s2:1", "oci": f"{prefix}/oci:1"}
    try:
        # docker push writes Docker schema 2: the image is loaded into the engine first.
        loaded = _run(
            "skopeo", "copy", "--quiet", f"--dest-daemon-host={services.docker_host}",
            source, f"docker-daemon:{pushed}",
        )  # fmt: skip
        assert loaded.returncode == 0, loaded.stderr
        done = _run("docker", "push", "--quiet", pushed, env=env)
        assert done.returncode == 0, done.stderr
        for form in ("v2s2", "oci"):
            copied = _run(
                "skopeo", "copy", "--quiet", "--all", f"--format={form}",
                "--dest-tls-verify=false", source, f"docker://{refs[form]}",
            )  # fmt: skip
            assert copied.returncode == 0, copied.stderr
        yield refs
    finally:
        _run("docker", "image", "rm", "--force", pushed, env=env)


@pytest.mark.requires("registry", "docker", "skopeo", "base-layout")
def test_bases_of_both_media_type_families_build_and_run(
    tmp_path: Path, services: Services, bases: dict[str, str]
) -> None:
    # The bases are what they claim: Docker's types for docker push and v2s2, OCI's for oci.
    for form, ref in bases.items():
        manifest = _child(ref, _raw(ref))
        config = manifest["config"]
        assert isinstance(config, dict)
        family = mediatypes.OCI_CONFIG if form == "oci" else mediatypes.DOCKER_CONFIG
        assert config["mediaType"] == family, f"{form}: {config}"
    assert _raw(bases["v2s2"])["mediaType"] == mediatypes.DOCKER_LIST
    binaries = {
        "on-docker": (bases["docker"], [AMD64]),
        "on-v2s2": (bases["v2s2"], [AMD64, "linux/arm64"]),  # a Docker manifest list
        "on-oci": (bases["oci"], [AMD64]),
    }
    root = make_repo(tmp_path / "repo", binaries)
    built = shipyard(root, "build", "--output=image", cache=tmp_path / "cache")
    assert built.returncode == 0, built.stderr
    env = {"DOCKER_HOST": services.docker_host, "PATH": "/usr/local/bin:/usr/bin:/bin"}
    for name in binaries:
        archive = tarball(root / "dist", name, AMD64)
        tag = f"{name}:{VERSION}-linux_amd64"
        loaded = _run("docker", "load", "--input", str(archive), env=env)
        assert loaded.returncode == 0, loaded.stderr
        try:
            ran = _run("docker", "run", "--rm", "--network", "none", tag, env=env)
            assert ran.returncode == 0, f"{name}: {ran.stderr}"
            assert ran.stdout.strip() == GREETING
        finally:
            _run("docker", "image", "rm", "--force", tag, f"{name}:{VERSION}", env=env)
