"""The registry client against real CNCF distribution registries: plain, basic auth and TLS."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.oci.remote.auth import env_variable_names
from shipyard.oci.remote.reference import parse_reference
from shipyard.oci.remote.registry import (
    MEDIA_DOCKER_LIST,
    MEDIA_DOCKER_MANIFEST,
    MEDIA_OCI_INDEX,
    MEDIA_OCI_MANIFEST,
    AuthError,
    CertificateError,
    NotFound,
    Registry,
    RegistryError,
)

from .conftest import Services, require_services
from .registries import ExtraRegistries, extra_registries, registry_binary

pytestmark = pytest.mark.integration

MiB = 1 << 20
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
UPLOADS = ("POST", "PATCH", "PUT")


@pytest.fixture(scope="module")
def registries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExtraRegistries]:
    """Three registries of our own on free loopback ports, for this module only."""
    if registry_binary() is None:
        reason = "docker-registry is not installed (apt-get install docker-registry)"
        if require_services():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    with extra_registries(tmp_path_factory.mktemp("registries")) as found:
        yield found


def no_docker_config(tmp_path: Path) -> dict[str, str]:
    """An environment without credentials: an empty DOCKER_CONFIG folder and PATH only."""
    empty = tmp_path / "no-docker-config"
    empty.mkdir(exist_ok=True)
    return {"DOCKER_CONFIG": str(empty), "PATH": os.environ.get("PATH", "")}


def random_blob(folder: Path, size: int) -> tuple[Path, str]:
    """A file of `size` random bytes, written in pieces, and its digest."""
    path = folder / f"blob-{size}-{os.urandom(4).hex()}"
    digest = hashlib.sha256()
    with path.open("wb") as out:
        left = size
        while left:
            piece = os.urandom(min(left, MiB))
            digest.update(piece)
            out.write(piece)
            left -= len(piece)
    return path, "sha256:" + digest.hexdigest()


def json_blob(folder: Path, value: object) -> tuple[Path, str, bytes]:
    """A JSON document as a blob file: (path, digest, bytes)."""
    data = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = folder / digest.replace(":", "-")
    path.write_bytes(data)
    return path, digest, data


def sha256_of(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def push_image(
    registry: Registry, repo: str, folder: Path, *, docker: bool = False
) -> tuple[bytes, str]:
    """Push a one-layer image (config, layer, manifest by digest); return its manifest."""
    layer, layer_digest = random_blob(folder, 2 * MiB + 17)
    config, config_digest, _ = json_blob(
        folder, {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers"}}
    )
    registry.push_blob(repo, layer_digest, layer.stat().st_size, layer)
    registry.push_blob(repo, config_digest, config.stat().st_size, config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_DOCKER_MANIFEST if docker else MEDIA_OCI_MANIFEST,
        "config": {
            "mediaType": DOCKER_CONFIG if docker else OCI_CONFIG,
            "digest": config_digest,
            "size": config.stat().st_size,
        },
        "layers": [
            {
                "mediaType": DOCKER_LAYER if docker else OCI_LAYER,
                "digest": layer_digest,
                "size": layer.stat().st_size,
            }
        ],
    }
    data = json.dumps(manifest, separators=(",", ":")).encode()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    media_type = str(manifest["mediaType"])
    assert registry.put_manifest(repo, digest, data, media_type) == digest
    return data, digest


def test_blobs_go_up_monolithic_and_chunked_and_come_back(
    registries: ExtraRegistries, tmp_path: Path
) -> None:
    registry = Registry(registries.plain.host, environ=no_docker_config(tmp_path))
    registry.ping()
    assert registry.stats.requests["GET"] == 2, "a TLS probe (refused: plain HTTP), then the ping"
    whole, whole_digest = random_blob(tmp_path, 5 * MiB)
    chunked, chunked_digest = random_blob(tmp_path, 6 * MiB + 123)

    assert registry.push_blob("blobs/app", whole_digest, 5 * MiB, whole) is True
    assert registry.stats.requests["PATCH"] == 0
    assert registry.stats.bytes_uploaded == 5 * MiB

    size = chunked.stat().st_size
    assert registry.push_blob("blobs/app", chunked_digest, size, chunked, chunk_size=MiB) is True
    assert registry.stats.requests["PATCH"] == 7  # six whole MiB and the 123-byte tail
    assert registry.stats.bytes_uploaded == 5 * MiB + size
    assert registry.stats.blobs_uploaded == 2

    for digest, source in ((whole_digest, whole), (chunked_digest, chunked)):
        assert registry.blob_exists("blobs/app", digest)
        back = tmp_path / "back" / digest.replace(":", "-")
        assert registry.pull_blob("blobs/app", digest, back) == source.stat().st_size
        assert sha256_of(back) == digest
        assert back.read_bytes() == source.read_bytes()
    assert not registry.blob_exists("blobs/app", "sha256:" + "0" * 64)
    assert not list((tmp_path / "back").glob(".*.part")), "no temporary files are left behind"

    with pytest.raises(NotFound, match="blobs/app"):
        registry.pull_blob("blobs/app", "sha256:" + "1" * 64, tmp_path / "missing")
    assert not (tmp_path / "missing").exists()

    with Registry(registries.plain.host, environ=no_docker_config(tmp_path)) as again:
        assert again.push_blob("blobs/app", whole_digest, 5 * MiB, whole) is False
        assert again.push_blob("blobs/app", chunked_digest, size, chunked, chunk_size=MiB) is False
    assert again.stats.bytes_uploaded == 0
    assert again.stats.blobs_skipped == 2
    assert not any(again.stats.requests[method] for method in UPLOADS)


def test_cross_repository_mount_uploads_nothing(
    registries: ExtraRegistries, tmp_path: Path
) -> None:
    blob, digest = random_blob(tmp_path, 3 * MiB)
    size = blob.stat().st_size
    Registry(registries.plain.host, environ=no_docker_config(tmp_path)).push_blob(
        "mount/source", digest, size, blob
    )

    registry = Registry(registries.plain.host, environ=no_docker_config(tmp_path))
    assert (
        registry.push_blob("mount/target", digest, size, blob, mount_from="mount/source") is False
    )
    assert registry.stats.blobs_mounted == 1
    assert registry.stats.bytes_uploaded == 0
    assert registry.stats.requests["POST"] == 1
    assert registry.stats.requests["PATCH"] == registry.stats.requests["PUT"] == 0
    assert registry.blob_exists("mount/target", digest)
    assert registry.pull_blob("mount/target", digest, tmp_path / "mounted") == size
    assert sha256_of(tmp_path / "mounted") == digest

    # A source that lacks the blob: the registry answers 202 and the bytes go up.
    other, other_digest = random_blob(tmp_path, MiB)
    assert registry.push_blob("mount/target", other_digest, MiB, other, mount_from="mount/empty")
    assert registry.stats.blobs_mounted == 1
    assert registry.stats.bytes_uploaded == MiB


def test_manifest_and_index_by_digest_then_tag(registries: ExtraRegistries, tmp_path: Path) -> None:
    registry = Registry(registries.plain.host, environ=no_docker_config(tmp_path))
    repo = "images/app"
    manifest, manifest_digest = push_image(registry, repo, tmp_path)
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_OCI_INDEX,
        "manifests": [
            {
                "mediaType": MEDIA_OCI_MANIFEST,
                "digest": manifest_digest,
                "size": len(manifest),
                "platform": {"architecture": "amd64", "os": "linux"},
            }
        ],
    }
    index_bytes = json.dumps(index, separators=(",", ":")).encode()
    index_digest = "sha256:" + hashlib.sha256(index_bytes).hexdigest()

    assert registry.manifest_exists(repo, "1.0") is None
    assert registry.put_manifest(repo, index_digest, index_bytes, MEDIA_OCI_INDEX) == index_digest
    assert registry.put_manifest(repo, "1.0", index_bytes, MEDIA_OCI_INDEX) == index_digest

    assert registry.get_manifest(repo, "1.0") == (index_bytes, MEDIA_OCI_INDEX, index_digest)
    assert registry.get_manifest(repo, manifest_digest) == (
        manifest,
        MEDIA_OCI_MANIFEST,
        manifest_digest,
    )
    assert registry.manifest_exists(repo, "1.0") == index_digest
    assert registry.manifest_exists(repo, manifest_digest) == manifest_digest
    assert registry.tags(repo) == ["1.0"]
    with pytest.raises(NotFound, match=r"images/app:2\.0"):
        registry.get_manifest(repo, "2.0")


def test_docker_manifest_list_pulled_by_tag(registries: ExtraRegistries, tmp_path: Path) -> None:
    registry = Registry(registries.plain.host, environ=no_docker_config(tmp_path))
    repo = "images/docker-list"
    manifest, manifest_digest = push_image(registry, repo, tmp_path, docker=True)
    listing = {
        "schemaVersion": 2,
        "mediaType": MEDIA_DOCKER_LIST,
        "manifests": [
            {
                "mediaType": MEDIA_DOCKER_MANIFEST,
                "digest": manifest_digest,
                "size": len(manifest),
                "platform": {"architecture": "amd64", "os": "linux"},
            }
        ],
    }
    data = json.dumps(listing, separators=(",", ":")).encode()
    digest = registry.put_manifest(
        repo, "sha256:" + hashlib.sha256(data).hexdigest(), data, MEDIA_DOCKER_LIST
    )
    registry.put_manifest(repo, "latest", data, MEDIA_DOCKER_LIST)

    got, media_type, got_digest = registry.get_manifest(repo, "latest")
    assert (got, media_type, got_digest) == (data, MEDIA_DOCKER_LIST, digest)
    child = json.loads(got)["manifests"][0]["digest"]
    assert registry.get_manifest(repo, child)[1] == MEDIA_DOCKER_MANIFEST


def test_manifest_naming_a_missing_blob_fails_once_with_the_registry_code(
    registries: ExtraRegistries, tmp_path: Path
) -> None:
    registry = Registry(registries.plain.host, environ=no_docker_config(tmp_path))
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": "sha256:" + "2" * 64, "size": 2},
        "layers": [],
    }
    data = json.dumps(manifest).encode()
    with pytest.raises(RegistryError) as caught:
        registry.put_manifest("images/broken", "v1", data, MEDIA_OCI_MANIFEST)
    assert caught.value.status == 400
    assert "MANIFEST_BLOB_UNKNOWN" in caught.value.codes
    assert "put manifest images/broken:v1" in str(caught.value)
    assert registry.stats.requests["PUT"] == 1, "a 400 is not retried"
    assert registry.stats.retries == 0


@pytest.mark.skipif(shutil.which("skopeo") is None, reason="skopeo is not installed")
def test_skopeo_reads_what_we_pushed(registries: ExtraRegistries, tmp_path: Path) -> None:
    registry = Registry(registries.plain.host, environ=no_docker_config(tmp_path))
    manifest, digest = push_image(registry, "images/skopeo", tmp_path)
    registry.put_manifest("images/skopeo", "checked", manifest, MEDIA_OCI_MANIFEST)
    raw = subprocess.run(
        [
            "skopeo",
            "inspect",
            "--raw",
            "--tls-verify=false",
            f"docker://{registries.plain.host}/images/skopeo:checked",
        ],
        capture_output=True,
        check=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    ).stdout
    assert raw == manifest
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == digest


def docker_config(folder: Path, host: str, user: str, password: str) -> dict[str, str]:
    """A DOCKER_CONFIG folder whose config.json logs in to `host` like `docker login` does."""
    folder.mkdir(parents=True, exist_ok=True)
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    (folder / "config.json").write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    return {"DOCKER_CONFIG": str(folder), "PATH": os.environ.get("PATH", "")}


def test_basic_auth_with_docker_config(registries: ExtraRegistries, tmp_path: Path) -> None:
    basic = registries.basic
    assert basic.username is not None and basic.password is not None
    environ = docker_config(tmp_path / "good", basic.host, basic.username, basic.password)
    registry = Registry(basic.host, environ=environ)
    registry.ping()
    blob, digest = random_blob(tmp_path, MiB + 1)
    assert registry.push_blob("private/app", digest, MiB + 1, blob) is True
    assert registry.pull_blob("private/app", digest, tmp_path / "back") == MiB + 1
    assert sha256_of(tmp_path / "back") == digest

    user_var, password_var = env_variable_names(basic.host)
    from_env = Registry(
        basic.host,
        environ={
            **no_docker_config(tmp_path),
            user_var: basic.username,
            password_var: basic.password,
        },
    )
    assert from_env.blob_exists("private/app", digest)


def test_basic_auth_wrong_password_is_a_clear_auth_error(
    registries: ExtraRegistries, tmp_path: Path
) -> None:
    basic = registries.basic
    assert basic.username is not None
    wrong = "not-the-password-7d1f"
    environ = docker_config(tmp_path / "bad", basic.host, basic.username, wrong)
    with pytest.raises(AuthError) as caught:
        Registry(basic.host, environ=environ).blob_exists("private/app", "sha256:" + "3" * 64)
    message = str(caught.value)
    assert caught.value.exit_code == 2
    assert wrong not in message
    assert base64.b64encode(f"{basic.username}:{wrong}".encode()).decode() not in message
    assert basic.host in message and "rejected" in message
    assert f"docker login {basic.host}" in message
    assert str(tmp_path / "bad" / "config.json") in message, "names where the credentials came from"
    assert wrong not in repr(caught.value)

    with pytest.raises(AuthError, match="no credentials were found"):
        Registry(basic.host, environ=no_docker_config(tmp_path)).ping()


def test_tls_with_the_ca_works_and_without_it_says_how_to_add_it(
    registries: ExtraRegistries, tmp_path: Path
) -> None:
    tls = registries.tls
    assert tls.ca_file is not None
    registry = Registry(tls.host, ca_file=tls.ca_file, environ=no_docker_config(tmp_path))
    blob, digest = random_blob(tmp_path, MiB)
    assert registry.push_blob("secure/app", digest, MiB, blob) is True
    assert registry.pull_blob("secure/app", digest, tmp_path / "back") == MiB

    untrusted = Registry(tls.host, certs_dirs=(), environ=no_docker_config(tmp_path))
    with pytest.raises(CertificateError) as caught:
        untrusted.blob_exists("secure/app", digest)
    message = str(caught.value)
    assert caught.value.exit_code == 2
    assert "not trusted" in message and "ca_file=" in message
    assert f"/etc/docker/certs.d/{tls.host}/ca.crt" in message

    # docker's convention: certs.d/<host:port>/ca.crt is picked up without ca_file.
    certs = tmp_path / "certs.d"
    (certs / tls.host).mkdir(parents=True)
    shutil.copyfile(tls.ca_file, certs / tls.host / "ca.crt")
    by_convention = Registry(tls.host, certs_dirs=(certs,), environ=no_docker_config(tmp_path))
    assert by_convention.blob_exists("secure/app", digest)


@pytest.mark.requires("registry")
def test_base_image_index_pulled_by_tag_from_the_shared_registry(
    services: Services, tmp_path: Path
) -> None:
    ref = parse_reference(services.base_image)
    registry = Registry(ref.registry, environ=no_docker_config(tmp_path))
    data, media_type, digest = registry.get_manifest(ref.repository, ref.identifier)
    assert media_type in (MEDIA_OCI_INDEX, MEDIA_DOCKER_LIST)
    assert digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert registry.manifest_exists(ref.repository, ref.identifier) == digest
    entries = json.loads(data)["manifests"]
    platforms = sorted((e["platform"]["os"], e["platform"]["architecture"]) for e in entries)
    assert platforms == [("linux", "amd64"), ("linux", "arm64")]
    for entry in entries:
        child, child_type, child_digest = registry.get_manifest(ref.repository, entry["digest"])
        assert child_type == entry["mediaType"] and child_digest == entry["digest"]
        config = json.loads(child)["config"]
        target = tmp_path / config["digest"].replace(":", "-")
        assert registry.pull_blob(ref.repository, config["digest"], target, size=config["size"])
        assert json.loads(target.read_bytes())["architecture"] == entry["platform"]["architecture"]


def test_token_auth_against_a_real_registry(registries: ExtraRegistries, tmp_path: Path) -> None:
    token = registries.token
    assert token.username is not None and token.password is not None
    environ = docker_config(tmp_path / "cfg", token.host, token.username, token.password)
    registry = Registry(token.host, environ=environ)
    registry.ping()
    blob, digest = random_blob(tmp_path, MiB + 5)
    assert registry.push_blob("tok/source", digest, MiB + 5, blob) is True
    assert registry.push_blob("tok/target", digest, MiB + 5, blob, mount_from="tok/source") is False
    assert registry.stats.blobs_mounted == 1
    manifest, manifest_digest = push_image(registry, "tok/target", tmp_path)
    registry.put_manifest("tok/target", "v1", manifest, MEDIA_OCI_MANIFEST)
    assert registry.get_manifest("tok/target", "v1")[2] == manifest_digest

    scopes = [tuple(sorted(q.get("scope", []))) for q in token.token_requests]
    assert all(q["service"] == ["shipyard-test-registry"] for q in token.token_requests)
    assert ("repository:tok/source:pull", "repository:tok/target:pull,push") in scopes
    assert len(scopes) == len(set(scopes)), "one token per scope set, then reused"

    wrong = "wrong-" + token.password
    bad = docker_config(tmp_path / "bad", token.host, token.username, wrong)
    with pytest.raises(AuthError) as caught:
        Registry(token.host, environ=bad).blob_exists("tok/source", digest)
    assert wrong not in str(caught.value) and "rejected the credentials" in str(caught.value)
