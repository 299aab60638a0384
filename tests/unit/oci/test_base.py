"""Base images from layouts, docker-archives and rootfs tarballs, per platform."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from shipyard.engine.cache.local import blob_store
from shipyard.errors import UsageError
from shipyard.oci.archive import write_docker_archive
from shipyard.oci.base import base_fingerprint, load_base
from shipyard.oci.layer import BlobStore, Entry, write_layer
from shipyard.oci.layout import write_layout
from shipyard.oci.model import (
    Config,
    Image,
    OCIError,
    Platform,
    append_layer,
    make_index,
    manifest_descriptor,
)

EPOCH = 1704067200


def _image(store: BlobStore, platform: str) -> Image:
    layer = write_layer([Entry("etc/arch", data=platform.encode())], store, EPOCH)
    return append_layer(Image(Platform.parse(platform), config=Config(user="1")), layer)


def _rootfs(path: Path) -> Path:
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("etc/os-release")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"ID\n"))
    return path


def test_a_layout_index_gives_each_platform_its_manifest(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "s")
    images = [_image(store, "linux/amd64"), _image(store, "linux/arm64/v8")]
    write_layout(tmp_path / "base", make_index(images), ref="3.11")
    bases = load_base("oci-layout:base", ["linux/arm64", "linux/amd64"], root=tmp_path, store=store)
    assert list(bases) == ["linux/arm64", "linux/amd64"]
    assert bases["linux/arm64"].digest == manifest_descriptor(images[1]).digest
    layers = bases["linux/amd64"].image.layers
    assert [x.descriptor for x in layers] == [x.descriptor for x in images[0].layers]
    assert layers[0].path.is_relative_to(tmp_path / "base"), "layout blobs are used in place"
    assert bases["linux/amd64"].name == "oci-layout:base"
    with pytest.raises(OCIError, match="no image for linux/s390x"):
        load_base("oci-layout:base", ["linux/s390x"], root=tmp_path, store=store)


def test_each_distinct_layer_chain_is_checked_once_through_each_of(tmp_path: Path) -> None:
    """The build passes its job budget's map: the platforms' checks may run at once,
    one per distinct chain; a refused layer still names the base."""
    from concurrent.futures import ThreadPoolExecutor

    from shipyard.oci.base import Base

    store = BlobStore(tmp_path / "s")
    images = [_image(store, "linux/amd64"), _image(store, "linux/arm64/v8")]
    write_layout(tmp_path / "base", make_index(images), ref="3.11")
    seen: list[list[str]] = []

    def each_of(fn: Callable[[Base], None], items: Sequence[Base]) -> None:
        seen.append([str(item.image.platform) for item in items])
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(fn, items))

    wanted = ["linux/arm64", "linux/amd64"]
    bases = load_base("oci-layout:base", wanted, root=tmp_path, store=store, each_of=each_of)
    assert sorted(seen[0]) == ["linux/amd64", "linux/arm64/v8"] and len(seen) == 1
    assert bases["linux/arm64"].digest == manifest_descriptor(images[1]).digest
    # One platform asked twice over: one chain, one check.
    seen.clear()
    load_base("oci-layout:base", ["linux/amd64"], root=tmp_path, store=store, each_of=each_of)
    assert seen == [["linux/amd64"]]


def test_rootfs_and_docker_archive_sources_combine(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "s")
    _rootfs(tmp_path / "amd64.tar")
    write_docker_archive(tmp_path / "arm.tar", _image(store, "linux/arm64"), ["b:1"], EPOCH)
    text = "rootfs:amd64.tar;linux/amd64, docker-archive:arm.tar"
    bases = load_base(text, ["linux/amd64", "linux/arm64"], root=tmp_path, store=store)
    amd = bases["linux/amd64"].image
    assert amd.platform == Platform("linux", "amd64")
    assert amd.config.env == ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    assert len(amd.layers) == 1 and amd.layers[0].path.is_relative_to(tmp_path / "s")
    assert bases["linux/arm64"].image.config.user == "1"


def test_bad_base_texts_say_how_to_fix_them(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "s")
    with pytest.raises(UsageError, match="rootfs:PATH;PLATFORM"):
        load_base("rootfs:x.tar", ["linux/amd64"], root=tmp_path, store=store)
    with pytest.raises(UsageError, match="does not exist"):
        load_base("oci-layout:nowhere", ["linux/amd64"], root=tmp_path, store=store)


def test_fingerprint_follows_the_base_content(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "s")
    write_layout(tmp_path / "base", make_index([_image(store, "linux/amd64")]), ref="1")
    before = base_fingerprint("oci-layout:base", tmp_path)
    assert before == base_fingerprint("oci-layout:base", tmp_path)
    write_layout(tmp_path / "base", make_index([_image(store, "linux/arm64")]), ref="1")
    assert base_fingerprint("oci-layout:base", tmp_path) != before


def test_the_blob_store_lives_in_the_cache_directory(tmp_path: Path) -> None:
    assert blob_store({"SHIPYARD_CACHE_DIR": str(tmp_path)}).root == tmp_path / "oci"
