"""The pure OCI model: values in, new values out, canonical JSON, stable digests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shipyard.oci.model import (
    INDEX,
    LAYER_GZIP,
    Config,
    Descriptor,
    Image,
    Layer,
    OCIError,
    Platform,
    append_layer,
    artifact_manifest_json,
    canonical_json,
    config_json,
    index_descriptor,
    index_json,
    make_index,
    manifest_descriptor,
    manifest_json,
    sha256_digest,
    with_config,
)

AMD64 = Platform("linux", "amd64")
ARM64 = Platform("linux", "arm64", "v8")


def _layer(n: int) -> Layer:
    digest = sha256_digest(f"blob{n}".encode())
    return Layer(Descriptor(LAYER_GZIP, digest, 10 + n), sha256_digest(f"tar{n}".encode()), Path())


def _image(platform: Platform = AMD64) -> Image:
    return Image(platform, config=Config(env=("PATH=/bin",), cmd=("python3",)), created="c")


def test_append_layer_returns_a_new_image_and_leaves_the_old_one() -> None:
    base = _image()
    grown = append_layer(base, _layer(1), created_by="deps")
    assert base.layers == () and base.history == ()
    assert grown.layers == (_layer(1),)
    assert grown.history[0].created_by == "deps" and grown.history[0].created == "c"
    config = json.loads(config_json(grown))
    assert config["rootfs"] == {"type": "layers", "diff_ids": [_layer(1).diff_id]}
    assert manifest_descriptor(base).digest != manifest_descriptor(grown).digest


def test_with_config_replaces_fields_and_freezes_mappings() -> None:
    base = _image()
    changed = with_config(base, entrypoint=["/app"], cmd=None, labels={"b": "2", "a": "1"})
    assert base.config.entrypoint is None and base.config.cmd == ("python3",)
    assert changed.config.entrypoint == ("/app",)
    assert changed.config.labels == (("a", "1"), ("b", "2"))
    runtime = json.loads(config_json(changed))["config"]
    assert runtime == {"Entrypoint": ["/app"], "Env": ["PATH=/bin"], "Labels": {"a": "1", "b": "2"}}
    with pytest.raises(TypeError, match="unknown field"):
        with_config(base, entry_point=["/x"])


def test_canonical_json_is_sorted_without_whitespace() -> None:
    assert canonical_json({"b": [1, {"d": 1, "c": 2}], "a": "é"}) == (
        '{"a":"é","b":[1,{"c":2,"d":1}]}'.encode()
    )
    data = manifest_json(append_layer(_image(), _layer(1)))
    assert b" " not in data and b"\n" not in data
    assert data == canonical_json(json.loads(data))


def test_index_digest_is_stable_and_independent_of_image_order() -> None:
    amd, arm = append_layer(_image(AMD64), _layer(1)), append_layer(_image(ARM64), _layer(2))
    first = make_index([amd, arm], {"org.opencontainers.image.version": "1.0"})
    second = make_index([arm, amd], {"org.opencontainers.image.version": "1.0"})
    assert index_json(first) == index_json(second)
    assert index_descriptor(first) == index_descriptor(second)
    doc = json.loads(index_json(first))
    assert doc["mediaType"] == INDEX
    assert [m["platform"] for m in doc["manifests"]] == [
        {"os": "linux", "architecture": "amd64"},
        {"os": "linux", "architecture": "arm64", "variant": "v8"},
    ]
    assert doc["annotations"] == {"org.opencontainers.image.version": "1.0"}
    changed = make_index([amd, with_config(arm, user="1")])
    assert index_descriptor(changed).digest != index_descriptor(first).digest


def test_an_index_has_one_image_per_platform() -> None:
    with pytest.raises(OCIError, match="one image per platform"):
        make_index([_image(), _image()])


def test_platforms_parse_print_and_match_variants() -> None:
    assert Platform.parse("linux/arm/v7") == Platform("linux", "arm", "v7")
    assert str(Platform.parse("linux/arm64")) == "linux/arm64"
    assert Platform.parse("linux/arm64").matches(ARM64)
    assert not Platform.parse("linux/arm/v6").matches(Platform("linux", "arm", "v7"))
    assert not AMD64.matches(ARM64)
    with pytest.raises(OCIError, match="os/arch"):
        Platform.parse("amd64")


def test_descriptors_round_trip_through_json() -> None:
    desc = Descriptor(INDEX, sha256_digest(b"x"), 1, ARM64, (("k", "v"),))
    assert Descriptor.from_json(desc.to_json()) == desc
    with pytest.raises(OCIError, match="malformed descriptor"):
        Descriptor.from_json({"mediaType": INDEX, "digest": "sha256:0"})


def test_config_keeps_unmodelled_fields_and_omits_empty_ones() -> None:
    image = Image(
        ARM64,
        config=Config(extra=(("Healthcheck", '{"Test":["NONE"]}'),)),
        extra=(("os.version", '"12"'),),
    )
    doc = json.loads(config_json(image))
    assert doc["config"] == {"Healthcheck": {"Test": ["NONE"]}}
    assert doc["os.version"] == "12" and doc["variant"] == "v8"
    assert "created" not in doc and "author" not in doc


def test_an_artifact_manifest_names_its_type_and_keeps_each_layers_annotations() -> None:
    config = Descriptor.of("application/vnd.oci.empty.v1+json", b"{}")
    layer = Descriptor("application/octet-stream", sha256_digest(b"x"), 1, None, (("k", "v"),))
    data = artifact_manifest_json("application/vnd.example+json", config, [layer])
    doc = json.loads(data)
    assert doc["artifactType"] == "application/vnd.example+json"
    assert doc["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert doc["config"] == config.to_json() and doc["layers"] == [layer.to_json()]
    assert data == canonical_json(doc)
