"""OCI image layouts (`oci-layout`, `index.json`, `blobs/sha256/...`): write and read.

A layout appears whole or not at all: it is written into a temporary folder
beside its target, then renamed into place. Layer blobs are hard-linked from
where they already are (the blob store, a base layout) when the file system
allows, and copied otherwise; JSON blobs are written from their canonical bytes.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from shipyard import _json
from shipyard._fs import TEMP_PREFIX
from shipyard.oci.layer import BlobStore
from shipyard.oci.mediatypes import (
    is_foreign_layer,
    is_index,
    is_manifest,
    is_schema1,
    oci_layer_type,
)
from shipyard.oci.model import (
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
    "INDEX_NESTING",
    "LAYOUT_VERSION",
    "REF_NAME",
    "blob_file",
    "find_images",
    "image_blobs",
    "image_from_json",
    "index_blobs",
    "index_entries",
    "layout_tops",
    "manifest_blobs",
    "put_blob",
    "read_blob",
    "read_layout",
    "replace_dir",
    "write_layout",
]

LAYOUT_VERSION = {"imageLayoutVersion": "1.0.0"}
INDEX_NESTING = 8
"""How deep indexes may nest below the top: real images nest one or two levels."""
REF_NAME = "org.opencontainers.image.ref.name"

Blobs = dict[str, bytes | Path]
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


# Why a hard link can fail where a copy works: another file system, a file system or
# file that refuses links (protected_hardlinks for another user's file), too many links.
_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES}


def put_blob(target: Path, content: bytes | Path, digest: str) -> None:
    """Place one blob at `target`: write bytes, or hard-link a file from where it is.

    A file is copied only when the file system refuses the link (`_NO_LINK`): a
    layout's layer blobs cost no bytes beside the store or base layout they come from.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        target.write_bytes(content)
        return
    try:
        os.link(content, target)
    except FileNotFoundError:
        raise OCIError(f"blob {digest} is missing: {content}") from None
    except OSError as exc:
        if exc.errno not in _NO_LINK:
            raise
        if not content.is_file():
            raise OCIError(f"blob {digest} is missing: {content}") from None
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


def write_layout(
    path: Path, index: Index, *, ref: str, notes: Mapping[str, str] | None = None
) -> Descriptor:
    """Write `index` and all its blobs as an OCI image layout at `path`.

    `index.json` lists one entry, the index, named `ref`, so tools that take
    a layout without a reference (`skopeo inspect oci:PATH`) find it. `notes` are
    annotations of that entry: facts about the local copy (what it was built from)
    that stay in the layout, never in the pushed index.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    built = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{path.name}.", dir=path.parent))
    try:
        for digest, content in sorted(index_blobs(index).items(), key=lambda i: i[0]):
            put_blob(blob_path(built, digest), content, digest)
        top = index_descriptor(index)
        named = Descriptor(
            top.media_type,
            top.digest,
            top.size,
            annotations=tuple(sorted({**(notes or {}), REF_NAME: ref}.items())),
        )
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
    """An Image from a manifest and config document; `locate` finds each layer's blob.

    OCIError for anything of the wrong shape or type (the documents may be anyone's)."""
    try:
        if not isinstance(manifest, Mapping) or not isinstance(config, Mapping):
            raise OCIError("an image manifest or config is not a JSON object")
        raw_layers = manifest["layers"]
        rootfs = config["rootfs"]
        diff_ids = rootfs["diff_ids"]  # type: ignore[index]
        assert isinstance(raw_layers, list) and isinstance(diff_ids, list)
        if len(raw_layers) != len(diff_ids):
            raise OCIError(f"{len(raw_layers)} layers but {len(diff_ids)} diff_ids in the config")
        layers = []
        for doc, diff_id in zip(raw_layers, diff_ids, strict=True):
            desc = Descriptor.from_json(doc)
            if is_foreign_layer(desc.media_type):
                raise OCIError(
                    f"layer {desc.digest} is foreign ({desc.media_type}): its blob is not "
                    "in the image; use a base without foreign layers (Linux bases have none)"
                )
            # Same bytes, older name: a Docker gzip layer is an OCI gzip layer.
            desc = Descriptor(oci_layer_type(desc.media_type), desc.digest, desc.size)
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
    except (KeyError, TypeError, ValueError, AttributeError, AssertionError) as exc:
        raise OCIError(f"malformed image manifest or config: {exc!r}") from None
    except RecursionError:  # re-encoding a value nested nearly as deep as the parser allows
        raise OCIError("malformed image config: values nested too deeply") from None


def layout_tops(layout: Path) -> tuple[Descriptor, ...]:
    """The descriptors `index.json` of the layout at `layout` lists (images or indexes)."""
    try:
        return index_entries((layout / "index.json").read_bytes())
    except (OSError, OCIError) as exc:
        raise OCIError(f"{layout}: not an OCI image layout (index.json: {exc})") from None


def blob_path(layout: Path, digest: str) -> Path:
    """Where the blob `digest` of the layout at `layout` lives (`blobs/sha256/<hex>`);
    OCIError for anything but a sha256 digest. The one place a layout's blob path is
    made."""
    return BlobStore(layout / "blobs").path(digest)


def read_blob(layout: Path, desc: Descriptor) -> bytes:
    """A JSON blob (index, manifest, config) of the layout, checked against its digest."""
    path = blob_path(layout, desc.digest)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise OCIError(f"{path}: blob {desc.digest} is missing ({exc.strerror})") from None
    if sha256_digest(data) != desc.digest:
        raise OCIError(f"{path}: content does not match its digest; the layout is damaged")
    return data


def blob_file(layout: Path, desc: Descriptor) -> Path:
    """The file of a (layer) blob of the layout, checked to be there at its size, not hashed."""
    path = blob_path(layout, desc.digest)
    if not path.is_file() or path.stat().st_size != desc.size:
        raise OCIError(f"{path}: blob {desc.digest} is missing or truncated ({desc.size} bytes)")
    return path


def _document(data: bytes) -> Mapping[str, object]:
    """An index, manifest or config from a registry or a layout, parsed: OCIError when it
    is not JSON (or nested too deep to read), or not a JSON object."""
    try:
        doc = _json.loads(data)
    except ValueError as exc:
        raise OCIError(f"an index or manifest is not JSON ({exc})") from None
    if not isinstance(doc, Mapping):
        raise OCIError("an index or manifest is not a JSON object")
    return doc


def index_entries(data: bytes) -> tuple[Descriptor, ...]:
    """The manifests (or nested indexes) an index or Docker manifest list names, in order."""
    entries = _document(data).get("manifests") or []
    if not isinstance(entries, list):
        raise OCIError("an index's manifests is not a list")
    return tuple(Descriptor.from_json(entry) for entry in entries)


def manifest_blobs(data: bytes) -> tuple[Descriptor, ...]:
    """The blobs an image manifest names: its config first, then its layers in order."""
    doc = _document(data)
    layers = doc.get("layers") or []
    if not isinstance(doc.get("config"), Mapping) or not isinstance(layers, list):
        raise OCIError("an image manifest needs a config object and a layers list")
    return tuple(Descriptor.from_json(d) for d in [doc["config"], *layers])


def find_images(
    tops: Sequence[Descriptor],
    wanted: Sequence[Platform],
    fetch: Callable[[Descriptor], bytes],
    locate: Callable[[Descriptor], Path],
) -> dict[Platform, tuple[Image, str]]:
    """The image (and its manifest digest) for each of `wanted`, below `tops`.

    Indexes (OCI or Docker manifest lists) are searched depth first, in order; the
    first match per platform wins. `fetch` reads an index, manifest or config blob
    (what it is: `mediatypes.is_index`, `is_manifest`, else a blob); `locate` gives
    a layer's file. Both families' manifests are read; what comes out is OCI. Indexes
    nested deeper than INDEX_NESTING, and any document of the wrong shape, raise OCIError.
    """
    found: dict[Platform, tuple[Image, str]] = {}

    def visit(desc: Descriptor, depth: int = 1) -> None:
        if is_index(desc.media_type):
            if depth > INDEX_NESTING:
                raise OCIError(
                    f"{desc.digest}: indexes nested more than {INDEX_NESTING} deep; "
                    "an image index names images (and at most a few nested indexes)"
                )
            for entry in index_entries(fetch(desc)):
                visit(entry, depth + 1)
        elif is_manifest(desc.media_type):
            if desc.platform and not any(p.matches(desc.platform) for p in wanted):
                return  # another platform, or an attestation (unknown/unknown)
            data = fetch(desc)
            config = _document(fetch(manifest_blobs(data)[0]))
            image = image_from_json(_document(data), config, locate)
            for platform in wanted:
                if platform not in found and platform.matches(image.platform):
                    found[platform] = (image, desc.digest)
        elif is_schema1(desc.media_type):
            raise OCIError(
                f"{desc.digest} is a Docker schema 1 manifest, which shipyard does not read; "
                "push the base again with a current docker or skopeo (schema 2 or OCI)"
            )

    try:
        for top in tops:
            visit(top)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise OCIError(f"malformed index or manifest ({exc!r})") from None
    return found


def read_layout(layout: Path, wanted: Sequence[Platform]) -> dict[Platform, tuple[Image, str]]:
    """The image (and its manifest digest) for each of `wanted` found in a layout.

    Layers stay where they are: each Layer's path is the layout's blob file.
    """
    tops = layout_tops(layout)
    try:
        return find_images(
            tops, wanted, lambda desc: read_blob(layout, desc), lambda d: blob_file(layout, d)
        )
    except OCIError as exc:
        if str(exc).startswith(str(layout)):
            raise
        raise OCIError(f"{layout}: {exc}") from None
