"""OCI layouts and docker-archives: written atomically and reproducibly, read back equal."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tarfile
from pathlib import Path

import pytest

from shipyard.oci.archive import read_docker_archive, write_docker_archive
from shipyard.oci.layer import BlobStore, Entry, write_layer
from shipyard.oci.layout import put_blob, read_layout, write_layout
from shipyard.oci.model import (
    Config,
    Image,
    OCIError,
    Platform,
    append_layer,
    config_json,
    index_descriptor,
    make_index,
    manifest_descriptor,
    with_config,
)

EPOCH = 1704067200
AMD64 = Platform("linux", "amd64")
ARM64 = Platform("linux", "arm64", "v8")


def _image(store: BlobStore, platform: Platform) -> Image:
    image = Image(platform, config=Config(env=("PATH=/bin",)), created="2024-01-01T00:00:00Z")
    for name in ("base", "app"):
        entry = Entry(f"opt/{name}/{platform.architecture}", data=name.encode())
        image = append_layer(image, write_layer([entry], store, EPOCH), created_by=name)
    return with_config(image, entrypoint=("/opt/app/run",), labels={"k": "v"})


def test_layout_round_trip(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "store")
    images = [_image(store, AMD64), _image(store, ARM64)]
    index = make_index(images, {"org.opencontainers.image.version": "1.0"})
    top = write_layout(tmp_path / "out", index, ref="1.0")
    assert top == index_descriptor(index)
    assert json.loads((tmp_path / "out" / "oci-layout").read_text()) == {
        "imageLayoutVersion": "1.0.0"
    }
    listed = json.loads((tmp_path / "out" / "index.json").read_text())["manifests"]
    assert listed == [
        {
            "mediaType": top.media_type,
            "digest": top.digest,
            "size": top.size,
            "annotations": {"org.opencontainers.image.ref.name": "1.0"},
        }
    ]
    for blob in (tmp_path / "out" / "blobs" / "sha256").iterdir():
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name
    found = read_layout(tmp_path / "out", [Platform.parse("linux/arm64"), AMD64])
    arm, arm_digest = found[Platform.parse("linux/arm64")]
    assert arm_digest == manifest_descriptor(images[1]).digest
    assert config_json(arm) == config_json(images[1])
    assert [x.descriptor for x in arm.layers] == [x.descriptor for x in images[1].layers]
    assert all(x.path.parent == tmp_path / "out" / "blobs" / "sha256" for x in arm.layers)


def test_layout_is_replaced_whole_and_leaves_no_temporaries(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "store")
    first = make_index([_image(store, AMD64)])
    write_layout(tmp_path / "dist" / "app", first, ref="1")
    (tmp_path / "dist" / "app" / "stray").write_text("old")
    second = make_index([with_config(_image(store, AMD64), user="65532")])
    write_layout(tmp_path / "dist" / "app", second, ref="2")
    assert sorted(p.name for p in (tmp_path / "dist").iterdir()) == ["app"]
    assert not (tmp_path / "dist" / "app" / "stray").exists()
    assert index_descriptor(second).digest in (tmp_path / "dist" / "app" / "index.json").read_text()


def test_docker_archive_is_reproducible_and_loadable_shape(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "store")
    image = _image(store, ARM64)
    tags = ["app:1.0", "app:1.0-linux_arm64"]
    write_docker_archive(tmp_path / "a.tar", image, tags, EPOCH)
    write_docker_archive(tmp_path / "b.tar", _image(store, ARM64), tags, EPOCH)
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    with tarfile.open(tmp_path / "a.tar") as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        config = tar.extractfile(manifest[0]["Config"]).read()  # type: ignore[union-attr]
    assert names == sorted(names, key=lambda n: n.split("/"))
    assert manifest[0]["RepoTags"] == tags
    assert manifest[0]["Layers"] == [
        "blobs/sha256/" + x.descriptor.digest.partition(":")[2] for x in image.layers
    ]
    assert config == config_json(image)
    assert {"oci-layout", "index.json"} <= set(names)


def test_docker_archive_round_trip(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "store")
    image = _image(store, AMD64)
    write_docker_archive(tmp_path / "a.tar", image, ["app:1"], EPOCH)
    (read,) = read_docker_archive(tmp_path / "a.tar", BlobStore(tmp_path / "other"))
    assert config_json(read) == config_json(image)
    assert manifest_descriptor(read) == manifest_descriptor(image)
    assert all(x.path.is_relative_to(tmp_path / "other") for x in read.layers)


def test_a_layout_without_the_platform_finds_nothing(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "store")
    write_layout(tmp_path / "out", make_index([_image(store, AMD64)]), ref="1")
    assert read_layout(tmp_path / "out", [ARM64]) == {}
    with pytest.raises(Exception, match="not an OCI image layout"):
        read_layout(tmp_path / "missing", [AMD64])


def test_a_blob_file_is_hard_linked_not_copied(tmp_path: Path) -> None:
    source = tmp_path / "store" / "blob"
    source.parent.mkdir()
    source.write_bytes(b"layer")
    put_blob(tmp_path / "layout" / "blob", source, "sha256:" + "a" * 64)
    assert (tmp_path / "layout" / "blob").stat().st_ino == source.stat().st_ino


@pytest.mark.parametrize("code", [errno.EXDEV, errno.EPERM])
def test_a_blob_is_copied_only_when_the_file_system_refuses_the_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    source = tmp_path / "blob"
    source.write_bytes(b"layer")

    def refuse(src: object, dst: object) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "link", refuse)
    put_blob(tmp_path / "layout" / "blob", source, "sha256:" + "a" * 64)
    copied = tmp_path / "layout" / "blob"
    assert copied.read_bytes() == b"layer"
    assert copied.stat().st_ino != source.stat().st_ino


def test_a_missing_blob_or_another_link_error_is_not_copied_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(OCIError, match="is missing"):
        put_blob(tmp_path / "layout" / "blob", tmp_path / "nothing", "sha256:" + "a" * 64)
    (tmp_path / "blob").write_bytes(b"layer")

    def full(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "link", full)
    with pytest.raises(OSError, match="No space"):
        put_blob(tmp_path / "layout" / "other", tmp_path / "blob", "sha256:" + "b" * 64)
