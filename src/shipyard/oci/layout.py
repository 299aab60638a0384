"""OCI image layouts (`oci-layout`, `index.json`, `blobs/sha256/...`): write and read.

A layout appears whole or not at all: it is written into a temporary folder
beside its target, then renamed into place. Layer blobs are hard-linked from
where they already are (the blob store, a base layout) when the file system
allows, and copied otherwise; JSON blobs are written from their canonical bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from shipyard._fs import TEMP_PREFIX
from shipyard.oci.layer import BlobStore
from shipyard.oci.model import (
    INDEX,
    LAYER_GZIP,
    MANIFEST,
    Config,
    Descriptor,
    History,
    Image,
    Index,
    Layer,
    OCIError,
    Platform,
    canonical_json,
    config_descriptor,
    config_json,
    index_descriptor,
    index_json,
    manifest_descriptor,
    manifest_json,
    sha256_digest,
)

__all__ = [
    "DOCKER_LIST",
    "DOCKER_MANIFEST",
    "LAYOUT_VERSION",
    "REF_NAME",
    "find_images",
    "image_blobs",
    "image_from_json",
    "index_blobs",
    "put_blob",
    "read_layout",
    "replace_dir",
    "write_layout",
]

LAYOUT_VERSION = {"imageLayoutVersion": "1.0.0"}
REF_NAME = "org.opencontainers.image.ref.name"

Blobs = dict[str, bytes | Path]
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
# Same bytes, older name: a Docker gzip layer is an OCI gzip layer.
_LAYER_ALIASES = {"application/vnd.docker.image.rootfs.diff.tar.gzip": LAYER_GZIP}
_RUNTIME_KEYS = {
    "Env": "env",
    "Entrypoint": "entrypoint",
    "Cmd": "cmd",
    "User": "user",
    "WorkingDir": "working_dir",
    "Labels": "labels",
    "ExposedPorts": "exposed_ports",
    "Volumes": "volumes",
    "StopSignal": "stop_signal",
}
_TOP_KEYS = {"architecture", "os", "variant", "created", "author", "config", "rootfs", "history"}


def image_blobs(image: Image) -> Blobs:
    """Every blob of one image by digest: layers (files), config and manifest (bytes)."""
    blobs: Blobs = {layer.descriptor.digest: layer.path for layer in image.layers}
    blobs[config_descriptor(image).digest] = config_json(image)
    blobs[manifest_descriptor(image).digest] = manifest_json(image)
    return blobs


def index_blobs(index: Index) -> Blobs:
    """Every blob of an index by digest, the index itself included."""
    blobs: Blobs = {}
    for image in index.images:
        blobs.update(image_blobs(image))
    blobs[index_descriptor(index).digest] = index_json(index)
    return blobs


def put_blob(target: Path, content: bytes | Path, digest: str) -> None:
    """Place one blob at `target`: write bytes, or link (else copy) a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        target.write_bytes(content)
        return
    if not content.is_file():
        raise OCIError(f"blob {digest} is missing: {content}")
    try:
        os.link(content, target)
    except OSError:
        shutil.copyfile(content, target)


def replace_dir(built: Path, target: Path) -> None:
    """Move the finished folder `built` to `target`, replacing what was there.

    A rename cannot replace a non-empty folder, so the old one is first renamed
    aside (a name the next build's stale-temp sweep removes if this dies here).
    """
    old: Path | None = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{target.name}.old.", dir=target.parent))
        os.replace(target, old / target.name)
    os.replace(built, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_layout(path: Path, index: Index, *, ref: str) -> Descriptor:
    """Write `index` and all its blobs as an OCI image layout at `path`.

    `index.json` lists one entry, the index, named `ref`, so tools that take
    a layout without a reference (`skopeo inspect oci:PATH`) find it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    built = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{path.name}.", dir=path.parent))
    try:
        for digest, content in sorted(index_blobs(index).items(), key=lambda i: i[0]):
            put_blob(built / "blobs" / digest.replace(":", "/", 1), content, digest)
        top = index_descriptor(index)
        named = Descriptor(top.media_type, top.digest, top.size, annotations=((REF_NAME, ref),))
        entry = {"schemaVersion": 2, "manifests": [named.to_json()]}
        (built / "index.json").write_bytes(canonical_json(entry))
        (built / "oci-layout").write_bytes(canonical_json(LAYOUT_VERSION))
        os.chmod(built, 0o755)
        replace_dir(built, path)
    except BaseException:
        shutil.rmtree(built, ignore_errors=True)
        raise
    return top


def _extra(doc: Mapping[str, object], known: object) -> tuple[tuple[str, str], ...]:
    return tuple(
        sorted((k, canonical_json(v).decode()) for k, v in doc.items() if k not in known)  # type: ignore[operator]
    )


def _runtime(doc: Mapping[str, object]) -> Config:
    values: dict[str, object] = {}
    for key, field in _RUNTIME_KEYS.items():
        value = doc.get(key)
        if value is None:
            continue
        if isinstance(value, dict):
            value = tuple(sorted(value.items())) if key == "Labels" else tuple(sorted(value))
        elif isinstance(value, list):
            value = tuple(str(v) for v in value)
        values[field] = value
    return Config(**values, extra=_extra(doc, _RUNTIME_KEYS))  # type: ignore[arg-type]


def image_from_json(
    manifest: Mapping[str, object],
    config: Mapping[str, object],
    locate: Callable[[Descriptor], Path],
) -> Image:
    """An Image from a manifest and config document; `locate` finds each layer's blob."""
    try:
        raw_layers = manifest["layers"]
        rootfs = config["rootfs"]
        diff_ids = rootfs["diff_ids"]  # type: ignore[index]
        assert isinstance(raw_layers, list) and isinstance(diff_ids, list)
        if len(raw_layers) != len(diff_ids):
            raise OCIError(f"{len(raw_layers)} layers but {len(diff_ids)} diff_ids in the config")
        layers = []
        for doc, diff_id in zip(raw_layers, diff_ids, strict=True):
            desc = Descriptor.from_json(doc)
            kind = _LAYER_ALIASES.get(desc.media_type, desc.media_type)
            desc = Descriptor(kind, desc.digest, desc.size)
            layers.append(Layer(desc, str(diff_id), locate(desc)))
        history = tuple(
            History(
                str(h.get("created", "")),
                str(h.get("created_by", "")),
                str(h.get("comment", "")),
                bool(h.get("empty_layer", False)),
            )
            for h in config.get("history") or []  # type: ignore[attr-defined]
        )
        runtime = config.get("config") or {}
        assert isinstance(runtime, Mapping)
        platform = Platform(str(config["os"]), str(config["architecture"]))
        variant = str(config.get("variant") or "")
        return Image(
            Platform(platform.os, platform.architecture, variant),
            tuple(layers),
            _runtime(runtime),
            history,
            str(config.get("created") or ""),
            str(config.get("author") or ""),
            extra=_extra(config, _TOP_KEYS),
        )
    except (KeyError, TypeError, AssertionError) as exc:
        raise OCIError(f"malformed image manifest or config: {exc!r}") from None


def _read_blob(layout: Path, desc: Descriptor) -> bytes:
    path = BlobStore(layout / "blobs").path(desc.digest)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise OCIError(f"{layout}: blob {desc.digest} is missing ({exc.strerror})") from None
    if sha256_digest(data) != desc.digest:
        raise OCIError(f"{path}: content does not match its digest; the layout is damaged")
    return data


def find_images(
    tops: Sequence[Descriptor],
    wanted: Sequence[Platform],
    fetch: Callable[[Descriptor], bytes],
    locate: Callable[[Descriptor], Path],
) -> dict[Platform, tuple[Image, str]]:
    """The image (and its manifest digest) for each of `wanted`, below `tops`.

    Indexes are searched depth first, in order; the first match per platform wins.
    `fetch` reads an index, manifest or config blob; `locate` gives a layer's file.
    """
    found: dict[Platform, tuple[Image, str]] = {}

    def visit(desc: Descriptor) -> None:
        if desc.media_type in (INDEX, DOCKER_LIST):
            for entry in json.loads(fetch(desc)).get("manifests", []):
                visit(Descriptor.from_json(entry))
        elif desc.media_type in (MANIFEST, DOCKER_MANIFEST):
            if desc.platform and not any(p.matches(desc.platform) for p in wanted):
                return  # another platform, or an attestation (unknown/unknown)
            manifest = json.loads(fetch(desc))
            config = json.loads(fetch(Descriptor.from_json(manifest["config"])))
            image = image_from_json(manifest, config, locate)
            for platform in wanted:
                if platform not in found and platform.matches(image.platform):
                    found[platform] = (image, desc.digest)

    try:
        for top in tops:
            visit(top)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise OCIError(f"malformed index or manifest ({exc!r})") from None
    return found


def read_layout(layout: Path, wanted: Sequence[Platform]) -> dict[Platform, tuple[Image, str]]:
    """The image (and its manifest digest) for each of `wanted` found in a layout.

    Layers stay where they are: each Layer's path is the layout's blob file.
    """
    store = BlobStore(layout / "blobs")
    try:
        top = json.loads((layout / "index.json").read_bytes())
        tops = [Descriptor.from_json(entry) for entry in top.get("manifests", [])]
    except (OSError, ValueError, AttributeError) as exc:
        raise OCIError(f"{layout}: not an OCI image layout (index.json: {exc})") from None

    def locate(desc: Descriptor) -> Path:
        path = store.path(desc.digest)
        if not path.is_file() or path.stat().st_size != desc.size:
            raise OCIError(f"{layout}: layer blob {desc.digest} is missing or truncated")
        return path

    try:
        return find_images(tops, wanted, lambda desc: _read_blob(layout, desc), locate)
    except OCIError as exc:
        raise OCIError(f"{layout}: {exc}") from None
