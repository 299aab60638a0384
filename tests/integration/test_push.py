"""Pushing OCI layouts with the fan-out publisher, checked with skopeo as an independent client."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.oci.remote.auth import Credentials
from shipyard.oci.remote.push import Publisher, read_layout_image
from shipyard.oci.remote.registry import MEDIA_OCI_INDEX, MEDIA_OCI_MANIFEST, Registry
from tests.integration.conftest import Services
from tests.integration.registries import (
    PASSWORD,
    USER,
    ExtraRegistry,
    running_registry,
    write_htpasswd,
)

pytestmark = [pytest.mark.integration, pytest.mark.requires("registry", "skopeo")]

LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
CONFIG = "application/vnd.oci.image.config.v1+json"


def _put(layout: Path, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256" / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def make_layout(
    layout: Path, platforms: tuple[str, ...], seed: str, *, shared: bytes = b"base-layer"
) -> str:
    """A small valid OCI layout: an index over one manifest per platform; returns its digest.

    Each platform gets a layer of random bytes derived from `seed` (same seed, same
    bytes) and a `shared` layer common to every layout made with the same value.
    """
    rng = random.Random(seed)
    (layout / "oci-layout").parent.mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    entries = []
    for platform in platforms:
        os_name, arch = platform.split("/")[:2]
        layers = [
            {"mediaType": LAYER, **_put(layout, shared)},
            {"mediaType": LAYER, **_put(layout, rng.randbytes(2048))},
        ]
        config = json.dumps(
            {"architecture": arch, "os": os_name, "rootfs": {"type": "layers", "diff_ids": []}},
            sort_keys=True,
        ).encode()
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": MEDIA_OCI_MANIFEST,
                "config": {"mediaType": CONFIG, **_put(layout, config)},
                "layers": layers,
            },
            sort_keys=True,
        ).encode()
        entries.append(
            {
                "mediaType": MEDIA_OCI_MANIFEST,
                **_put(layout, manifest),
                "platform": {"os": os_name, "architecture": arch},
            }
        )
    index = json.dumps(
        {"schemaVersion": 2, "mediaType": MEDIA_OCI_INDEX, "manifests": entries}, sort_keys=True
    ).encode()
    root = {"mediaType": MEDIA_OCI_INDEX, **_put(layout, index)}
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [root]}))
    return str(root["digest"])


def skopeo_raw(image: str, creds: str | None = None) -> bytes:
    """The raw manifest skopeo reads for `image` (docker://host/repo:tag)."""
    command = ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{image}"]
    if creds:
        command[3:3] = ["--creds", creds]
    return subprocess.run(command, capture_output=True, check=True, timeout=60).stdout


@pytest.fixture(scope="module")
def basic_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExtraRegistry]:
    folder = tmp_path_factory.mktemp("basic-registry")
    write_htpasswd(folder / "htpasswd", USER, PASSWORD)
    with running_registry(folder / "registry", htpasswd=folder / "htpasswd") as registry:
        yield registry


def _factory(basic: ExtraRegistry) -> tuple[dict[str, Registry], Publisher]:
    made: dict[str, Registry] = {}

    def registry_for(host: str) -> Registry:
        creds = Credentials(USER, PASSWORD) if host == basic.host else None
        made[host] = Registry(host, credentials=creds)
        return made[host]

    return made, Publisher(registry_for)


def test_fan_out_push_is_seen_by_skopeo_and_second_push_uploads_nothing(
    services: Services, basic_registry: ExtraRegistry, tmp_path: Path
) -> None:
    digest = make_layout(tmp_path / "img", ("linux/amd64", "linux/arm64"), "fan-out")
    prefix = f"push-{uuid.uuid4().hex[:8]}"
    hubs = [f"{services.registry}/{prefix}", f"{basic_registry.host}/{prefix}"]
    made, publisher = _factory(basic_registry)
    results = publisher.push("meshctl", tmp_path / "img", hubs, ["1.0.0", "latest"])
    assert [r.digest for r in results] == [digest, digest]
    creds = f"{USER}:{PASSWORD}"
    for result, auth in zip(results, (None, creds), strict=True):
        for tag in ("1.0.0", "latest"):
            raw = skopeo_raw(f"{result.name}:{tag}", auth)
            assert "sha256:" + hashlib.sha256(raw).hexdigest() == digest
            platforms = [m["platform"]["architecture"] for m in json.loads(raw)["manifests"]]
            assert platforms == ["amd64", "arm64"]
    assert made[basic_registry.host].stats.blobs_uploaded == 5  # shared + 2 random + 2 configs
    # Again, with fresh clients: every step is a HEAD that finds its target.
    made, publisher = _factory(basic_registry)
    lines: list[str] = []
    publisher.on_step = lines.append
    again = publisher.push("meshctl", tmp_path / "img", hubs, ["1.0.0", "latest"])
    assert [r.digest for r in again] == [digest, digest]
    for client in made.values():
        assert client.stats.blobs_uploaded == 0
        assert client.stats.requests["PUT"] == 0
        assert client.stats.requests["POST"] == 0
    assert lines and all(line.startswith("have ") for line in lines)


def test_unauthenticated_push_to_basic_auth_registry_fails(
    services: Services, basic_registry: ExtraRegistry, tmp_path: Path
) -> None:
    make_layout(tmp_path / "img", ("linux/amd64",), "no-auth")
    publisher = Publisher(lambda host: Registry(host, credentials=Credentials(USER, "wrong")))
    with pytest.raises(Exception, match=r"401|denied|unauthorized|credentials|log in"):
        publisher.push("meshctl", tmp_path / "img", [f"{basic_registry.host}/x"], ["1"])


def test_second_repository_on_same_host_mounts_shared_blobs(
    services: Services, tmp_path: Path
) -> None:
    make_layout(tmp_path / "a", ("linux/amd64",), "mount-a", shared=uuid.uuid4().bytes)
    prefix = f"mount-{uuid.uuid4().hex[:8]}"
    made: dict[str, Registry] = {}

    def registry_for(host: str) -> Registry:
        made[host] = Registry(host)
        return made[host]

    publisher = Publisher(registry_for)
    image = read_layout_image(tmp_path / "a")
    publisher.push("one", image, [f"{services.registry}/{prefix}"], ["t"])
    publisher.push("two", image, [f"{services.registry}/{prefix}"], ["t"])
    stats = made[services.registry].stats
    assert stats.blobs_uploaded == len(image.blobs)
    assert stats.blobs_mounted == len(image.blobs)
    assert skopeo_raw(f"{services.registry}/{prefix}/two:t") == image.root[2]


def test_tags_never_point_at_an_incomplete_index(services: Services, tmp_path: Path) -> None:
    platforms = ("linux/amd64", "linux/arm64", "linux/arm/v7", "linux/ppc64le", "linux/s390x")
    make_layout(tmp_path / "img", platforms, "poll")
    image = read_layout_image(tmp_path / "img")
    repo = f"poll-{uuid.uuid4().hex[:8]}/meshctl"
    watcher = Registry(services.registry)
    seen: list[str] = []
    problems: list[str] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            if watcher.manifest_exists(repo, "latest") is None:
                continue
            data, _, digest = watcher.get_manifest(repo, "latest")
            seen.append(digest)
            for entry in json.loads(data)["manifests"]:
                if watcher.manifest_exists(repo, entry["digest"]) != entry["digest"]:
                    problems.append(f"{entry['digest']} missing while tagged")
                for blob in image.blobs:
                    if not watcher.blob_exists(repo, blob.digest):
                        problems.append(f"blob {blob.digest} missing while tagged")

    thread = threading.Thread(target=poll)
    thread.start()
    try:
        hub = f"{services.registry}/{repo.partition('/')[0]}"
        Publisher(Registry).push("meshctl", image, [hub], ["latest"])
        # Let the poller see the finished tag at least once.
        for _ in range(200):
            if seen:
                break
            threading.Event().wait(0.05)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert seen, "the poller never saw the tag"
    assert set(seen) == {image.root[0]}
    assert problems == []
