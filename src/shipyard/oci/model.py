"""OCI images as frozen values: platforms, descriptors, layers, images and indexes.

Every function here is pure: appending a layer or building an index returns a
new value, and the JSON of a value is canonical (sorted keys, no whitespace), so
equal values have equal digests. Only the layout writer, the archive writer and
the registry client touch disk or network.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import reprlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from shipyard.errors import ShipyardError

# The OCI types shipyard writes (both families' types and predicates: mediatypes).
from shipyard.oci.mediatypes import OCI_CONFIG as CONFIG
from shipyard.oci.mediatypes import OCI_INDEX as INDEX
from shipyard.oci.mediatypes import OCI_LAYER as LAYER
from shipyard.oci.mediatypes import OCI_LAYER_GZIP as LAYER_GZIP
from shipyard.oci.mediatypes import OCI_MANIFEST as MANIFEST

__all__ = [
    "CONFIG",
    "INDEX",
    "LAYER",
    "LAYER_GZIP",
    "MANIFEST",
    "Annotations",
    "Config",
    "Descriptor",
    "History",
    "Image",
    "Index",
    "Layer",
    "OCIError",
    "Platform",
    "append_layer",
    "artifact_manifest_json",
    "as_annotations",
    "canonical_json",
    "config_descriptor",
    "config_json",
    "index_descriptor",
    "index_json",
    "make_index",
    "manifest_descriptor",
    "manifest_json",
    "sha256_digest",
    "with_config",
]

# Sorted (key, value) pairs: a mapping that is hashable and has one order.
Annotations = tuple[tuple[str, str], ...]


class OCIError(ShipyardError):
    """An image could not be read, assembled or written; names the file or blob and why."""


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 3, 80, 80


def _shown(value: object) -> str:
    """A short repr of a hostile value for a message: bounded in length and depth."""
    return _SHORT.repr(value)


def canonical_json(value: object) -> bytes:
    """JSON with sorted keys and no whitespace: one byte string per value."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256_digest(data: bytes) -> str:
    """The OCI digest (`sha256:<hex>`) of `data`."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def as_annotations(values: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> Annotations:
    """Freeze a mapping (or pairs; later pairs win) into sorted pairs."""
    items = values.items() if isinstance(values, Mapping) else values
    return tuple(sorted(dict(items).items()))


@dataclass(frozen=True, order=True)
class Platform:
    """An OCI platform: os, architecture and optional variant (`linux/arm/v7`)."""

    os: str
    architecture: str
    variant: str = ""

    @classmethod
    def parse(cls, text: str) -> Platform:
        """`linux/arm64` or `linux/arm/v7` as a Platform."""
        parts = text.split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise OCIError(f"'{text}' is not a platform; write os/arch[/variant], e.g. linux/arm64")
        return cls(*parts)

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)

    def matches(self, other: Platform) -> bool:
        """Whether an image for `other` serves a request for this platform.

        A missing variant on either side matches any (arm64 images often say v8).
        """
        same = (self.os, self.architecture) == (other.os, other.architecture)
        return same and (not self.variant or not other.variant or self.variant == other.variant)

    def to_json(self) -> dict[str, str]:
        """The `platform` object of an index entry."""
        out = {"os": self.os, "architecture": self.architecture}
        return out | ({"variant": self.variant} if self.variant else {})


@dataclass(frozen=True)
class Descriptor:
    """A content descriptor: what a blob is, its digest and size."""

    media_type: str
    digest: str
    size: int
    platform: Platform | None = None
    annotations: Annotations = ()

    @classmethod
    def of(cls, media_type: str, data: bytes) -> Descriptor:
        """The descriptor of an in-memory blob."""
        return cls(media_type, sha256_digest(data), len(data))

    @classmethod
    def from_json(cls, doc: object) -> Descriptor:
        """A descriptor from its JSON object (unknown fields such as `urls` are dropped).

        A document from a registry or a layout may hold anything: what is not an object
        with a string mediaType and digest, a byte count as size, an object of strings
        as platform and string annotations raises OCIError."""
        if not isinstance(doc, Mapping):
            raise OCIError(f"malformed descriptor {_shown(doc)}: not a JSON object")
        try:
            raw = doc.get("platform")
            platform = None
            if raw is not None:
                if not isinstance(raw, Mapping):
                    raise TypeError("platform is not an object")
                values = (raw["os"], raw["architecture"], raw.get("variant") or "")
                if not all(isinstance(v, str) for v in values):
                    raise TypeError("platform os, architecture or variant is not a string")
                platform = Platform(*values)
            notes = doc.get("annotations") or {}
            if not isinstance(notes, Mapping) or not all(
                isinstance(v, str) for v in notes.values()
            ):
                raise TypeError("annotations is not an object of strings")
            media_type, digest, size = doc["mediaType"], doc["digest"], doc["size"]
            if not isinstance(media_type, str) or not isinstance(digest, str):
                raise TypeError("mediaType or digest is not a string")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise TypeError("size is not a byte count")
            return cls(media_type, digest, size, platform, as_annotations(notes))
        except (KeyError, TypeError) as exc:
            raise OCIError(f"malformed descriptor {_shown(doc)}: {exc}") from None

    def to_json(self) -> dict[str, object]:
        """The JSON object of this descriptor."""
        out: dict[str, object] = {
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.size,
        }
        if self.platform is not None:
            out["platform"] = self.platform.to_json()
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out


@dataclass(frozen=True)
class Layer:
    """A layer blob on disk: its descriptor (compressed) and diff_id (uncompressed)."""

    descriptor: Descriptor
    diff_id: str
    path: Path


@dataclass(frozen=True)
class History:
    """One entry of an image's history (what made a layer, or an empty step)."""

    created: str = ""
    created_by: str = ""
    comment: str = ""
    empty_layer: bool = False

    def to_json(self) -> dict[str, object]:
        """The history entry as JSON, empty fields left out."""
        out: dict[str, object] = {
            k: v for k, v in (("created", self.created), ("created_by", self.created_by)) if v
        }
        if self.comment:
            out["comment"] = self.comment
        if self.empty_layer:
            out["empty_layer"] = True
        return out


@dataclass(frozen=True)
class Config:
    """The runtime part of an image config (what `docker run` uses)."""

    env: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] | None = None
    cmd: tuple[str, ...] | None = None
    user: str = ""
    working_dir: str = ""
    labels: Annotations = ()
    exposed_ports: tuple[str, ...] = ()
    volumes: tuple[str, ...] = ()
    stop_signal: str = ""
    # Fields shipyard does not model (Healthcheck, Shell, ...), kept as canonical JSON.
    extra: Annotations = ()


@dataclass(frozen=True)
class Image:
    """One platform's image: its layers, config and manifest annotations."""

    platform: Platform
    layers: tuple[Layer, ...] = ()
    config: Config = Config()
    history: tuple[History, ...] = ()
    created: str = ""
    author: str = ""
    annotations: Annotations = ()
    # Top-level config fields shipyard does not model (os.version, ...), as canonical JSON.
    extra: Annotations = ()


@dataclass(frozen=True)
class Index:
    """Images of one application for several platforms, with index annotations."""

    images: tuple[Image, ...]
    annotations: Annotations = ()


def append_layer(image: Image, layer: Layer, *, created_by: str = "", comment: str = "") -> Image:
    """A new image with `layer` on top and a history entry saying what made it."""
    entry = History(image.created, created_by, comment)
    return dataclasses.replace(
        image, layers=(*image.layers, layer), history=(*image.history, entry)
    )


def with_config(image: Image, **changes: object) -> Image:
    """A new image whose runtime config has `changes` (fields of Config) applied.

    Mappings given for `labels` are frozen; lists become tuples.
    """
    unknown = set(changes) - {f.name for f in dataclasses.fields(Config)}
    if unknown:
        raise TypeError(f"with_config: unknown field(s) {', '.join(sorted(unknown))}")
    frozen: dict[str, object] = {}
    for name, value in changes.items():
        if name == "labels" and isinstance(value, Mapping):
            frozen[name] = as_annotations(value)
        else:
            frozen[name] = tuple(value) if isinstance(value, list) else value
    return dataclasses.replace(image, config=dataclasses.replace(image.config, **frozen))  # type: ignore[arg-type]


def make_index(images: Iterable[Image], notes: Mapping[str, str] | None = None) -> Index:
    """An index over `images`, one per platform, ordered by platform for a stable digest."""
    ordered = tuple(sorted(images, key=lambda i: i.platform))
    seen = [str(i.platform) for i in ordered]
    if len(set(seen)) != len(seen):
        raise OCIError(f"an index needs one image per platform, got {', '.join(seen)}")
    return Index(ordered, as_annotations(notes or {}))


def _runtime_json(config: Config) -> dict[str, object]:
    out: dict[str, object] = {key: json.loads(value) for key, value in config.extra}
    fields: dict[str, object] = {
        "Env": list(config.env),
        "User": config.user,
        "WorkingDir": config.working_dir,
        "Labels": dict(config.labels),
        "ExposedPorts": {p: {} for p in config.exposed_ports},
        "Volumes": {v: {} for v in config.volumes},
        "StopSignal": config.stop_signal,
    }
    out.update({k: v for k, v in fields.items() if v})
    for key, command in (("Entrypoint", config.entrypoint), ("Cmd", config.cmd)):
        if command is not None:
            out[key] = list(command)
    return out


def config_json(image: Image) -> bytes:
    """The image config blob (architecture, os, runtime config, rootfs, history)."""
    doc: dict[str, object] = {key: json.loads(value) for key, value in image.extra}
    doc |= {
        "architecture": image.platform.architecture,
        "os": image.platform.os,
        "config": _runtime_json(image.config),
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in image.layers]},
        "history": [entry.to_json() for entry in image.history],
    }
    extra = {"variant": image.platform.variant, "created": image.created, "author": image.author}
    doc |= {k: v for k, v in extra.items() if v}
    return canonical_json(doc)


def config_descriptor(image: Image) -> Descriptor:
    """The descriptor of the image's config blob."""
    return Descriptor.of(CONFIG, config_json(image))


def manifest_json(image: Image) -> bytes:
    """The image manifest blob: config and layer descriptors plus annotations."""
    doc: dict[str, object] = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": config_descriptor(image).to_json(),
        "layers": [layer.descriptor.to_json() for layer in image.layers],
    }
    if image.annotations:
        doc["annotations"] = dict(image.annotations)
    return canonical_json(doc)


def artifact_manifest_json(
    artifact_type: str, config: Descriptor, layers: Iterable[Descriptor]
) -> bytes:
    """An artifact manifest: an image manifest with an `artifactType`, whose config and
    layers are any blobs (each layer's descriptor carrying its own annotations)."""
    return canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "artifactType": artifact_type,
            "config": config.to_json(),
            "layers": [layer.to_json() for layer in layers],
        }
    )


def manifest_descriptor(image: Image) -> Descriptor:
    """The descriptor of the image's manifest, with its platform, as an index lists it."""
    data = manifest_json(image)
    return Descriptor(MANIFEST, sha256_digest(data), len(data), image.platform)


def index_json(index: Index) -> bytes:
    """The image index blob."""
    doc: dict[str, object] = {
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [manifest_descriptor(image).to_json() for image in index.images],
    }
    if index.annotations:
        doc["annotations"] = dict(index.annotations)
    return canonical_json(doc)


def index_descriptor(index: Index) -> Descriptor:
    """The descriptor of the index blob: its digest is the multi-arch image's digest."""
    return Descriptor.of(INDEX, index_json(index))
