"""Both media-type families: what each type is, a base layout in Docker's types, and the
push reader on the layout module's readers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shipyard.errors import UsageError
from shipyard.oci import mediatypes as mt
from shipyard.oci.layer import BlobStore, Entry, write_layer
from shipyard.oci.layout import read_layout, write_layout
from shipyard.oci.model import (
    Image,
    OCIError,
    Platform,
    append_layer,
    canonical_json,
    config_json,
    index_descriptor,
    make_index,
    manifest_descriptor,
    sha256_digest,
)
from shipyard.oci.remote.push import LayoutManifest, read_layout_image

EPOCH = 1704067200
SRC = Path(__file__).resolve().parents[3] / "src" / "shipyard"


def test_each_type_is_what_its_family_says() -> None:
    assert mt.is_index(mt.OCI_INDEX) and mt.is_index(mt.DOCKER_LIST)
    assert mt.is_manifest(mt.OCI_MANIFEST) and mt.is_manifest(mt.DOCKER_MANIFEST + "; x=y")
    assert mt.is_config(mt.OCI_CONFIG) and mt.is_config(mt.DOCKER_CONFIG)
    assert not mt.is_manifest(mt.DOCKER_CONFIG) and not mt.is_index(mt.DOCKER_CONFIG)
    for layer in (mt.OCI_LAYER, mt.OCI_LAYER_GZIP, mt.OCI_LAYER_ZSTD, mt.DOCKER_LAYER):
        assert mt.is_layer(layer) and not mt.is_foreign_layer(layer)
    for foreign in (mt.DOCKER_FOREIGN_LAYER, mt.OCI_LAYER_NONDISTRIBUTABLE_GZIP):
        assert mt.is_layer(foreign) and mt.is_foreign_layer(foreign)
    assert mt.oci_layer_type(mt.DOCKER_LAYER) == mt.OCI_LAYER_GZIP
    assert mt.is_schema1(mt.DOCKER_MANIFEST_V1_SIGNED) and not mt.is_manifest(mt.DOCKER_MANIFEST_V1)
    assert set(mt.MANIFEST_TYPES) == {
        mt.OCI_INDEX,
        mt.OCI_MANIFEST,
        mt.DOCKER_LIST,
        mt.DOCKER_MANIFEST,
    }


def test_no_media_type_literal_outside_the_module() -> None:
    strays = [
        f"{path.relative_to(SRC)}:{number}"
        for path in SRC.rglob("*.py")
        if path.name != "mediatypes.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "application/vnd" in line
    ]
    assert not strays, f"media types spelled outside shipyard.oci.mediatypes: {strays}"


def _image(store: BlobStore, platform: str) -> Image:
    layer = write_layer([Entry("etc/arch", data=platform.encode())], store, EPOCH)
    return append_layer(Image(Platform.parse(platform)), layer)


def _put(layout: Path, data: bytes) -> dict[str, object]:
    digest = sha256_digest(data)
    path = layout / "blobs" / "sha256" / digest[7:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"digest": digest, "size": len(data)}


def _docker_layout(layout: Path, images: list[Image], layer_type: str = mt.DOCKER_LAYER) -> None:
    """The layout `docker push` + `skopeo copy` would give: every type Docker's."""
    entries = []
    for image in images:
        config = {"mediaType": mt.DOCKER_CONFIG, **_put(layout, config_json(image))}
        layers = []
        for layer in image.layers:
            blob = _put(layout, layer.path.read_bytes())
            layers.append({"mediaType": layer_type, **blob})
        manifest = {
            "schemaVersion": 2,
            "mediaType": mt.DOCKER_MANIFEST,
            "config": config,
            "layers": layers,
        }
        entry = {"mediaType": mt.DOCKER_MANIFEST, **_put(layout, canonical_json(manifest))}
        entries.append(entry | {"platform": image.platform.to_json()})
    listed = {"schemaVersion": 2, "mediaType": mt.DOCKER_LIST, "manifests": entries}
    top = {"mediaType": mt.DOCKER_LIST, **_put(layout, canonical_json(listed))}
    (layout / "index.json").write_bytes(canonical_json({"schemaVersion": 2, "manifests": [top]}))
    (layout / "oci-layout").write_bytes(b'{"imageLayoutVersion":"1.0.0"}')


def test_a_base_in_dockers_types_is_read_into_oci_values(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "s")
    images = [_image(store, "linux/amd64"), _image(store, "linux/arm64")]
    _docker_layout(tmp_path / "base", images)
    found = read_layout(tmp_path / "base", [Platform.parse("linux/arm64")])
    (image, digest) = found[Platform.parse("linux/arm64")]
    assert [x.diff_id for x in image.layers] == [x.diff_id for x in images[1].layers]
    assert [x.descriptor.media_type for x in image.layers] == [mt.OCI_LAYER_GZIP]
    assert digest.startswith("sha256:")


def test_foreign_layers_and_schema1_are_refused_with_the_reason(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "s")
    _docker_layout(tmp_path / "win", [_image(store, "linux/amd64")], mt.DOCKER_FOREIGN_LAYER)
    with pytest.raises(OCIError, match="foreign"):
        read_layout(tmp_path / "win", [Platform.parse("linux/amd64")])
    old = tmp_path / "old"
    top = {"mediaType": mt.DOCKER_MANIFEST_V1_SIGNED, **_put(old, b"{}")}
    (old / "index.json").write_bytes(canonical_json({"manifests": [top]}))
    with pytest.raises(OCIError, match="schema 1"):
        read_layout(old, [Platform.parse("linux/amd64")])


def test_push_reads_a_layout_with_the_layout_readers(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "s")
    images = [_image(store, "linux/amd64"), _image(store, "linux/arm/v7")]
    index = make_index(images)
    write_layout(tmp_path / "img", index, ref="1")
    got = read_layout_image(tmp_path / "img")
    assert got.root == LayoutManifest(
        index_descriptor(index).digest,
        mt.OCI_INDEX,
        (tmp_path / "img" / "blobs" / "sha256" / index_descriptor(index).digest[7:]).read_bytes(),
    )
    assert got.platforms == ("linux/amd64", "linux/arm/v7")
    assert [m.digest for m in got.manifests] == [manifest_descriptor(i).digest for i in images]
    assert len(got.blobs) == 4  # two configs, two layers (the layers differ by platform)
    # A damaged manifest, a truncated layer: rebuild the image (exit 2), not a KeyError.
    layer = next(b for b in got.blobs if b.digest == images[0].layers[0].descriptor.digest)
    layer.path.write_bytes(layer.path.read_bytes()[:-1])
    with pytest.raises(UsageError, match=r"missing or truncated .*; rebuild the image"):
        read_layout_image(tmp_path / "img")
    manifest = tmp_path / "img" / "blobs" / "sha256" / got.manifests[0].digest[7:]
    manifest.write_bytes(json.dumps({"damaged": True}).encode())
    with pytest.raises(UsageError, match="does not match its digest"):
        read_layout_image(tmp_path / "img")
