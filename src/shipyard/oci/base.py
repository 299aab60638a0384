"""Base images: read from an OCI layout, a docker-archive, a rootfs tarball or a registry.

A base names one or more sources, separated by commas (`basespec` parses them:
the same parser `shipyard check` and the action key use):

    oci-layout:PATH                 an OCI image layout (a multi-arch index is searched)
    docker-archive:PATH             a tarball from `docker save`
    rootfs:PATH;PLATFORM            a root file system tar (gzip or plain) for one platform
    REGISTRY/REPOSITORY[:TAG|@DIGEST]   a registry reference

Layouts and registries may hold either family of media types, OCI or Docker
schema 2 (what `docker push` writes); the image built on them is OCI.
Each requested platform takes the first source that has it. Layer blobs are
used as they are, never re-compressed: a layout's blobs in place, others from
the blob store (the cache), where blobs are kept by digest and touched (mtime)
when a build uses them, so a prune of the cache removes the least recently used
first; a process using the store holds the cache's lock shared, so a prune in
another process keeps them (`shipyard.engine.cache.local.blob_store`). Every image's
layers are checked once, in order (`check_base_layers`): a base whose layers
would write outside the root they are unpacked into, alone or through a link an
earlier layer made, is refused, whatever its source.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from shipyard.errors import UsageError
from shipyard.oci.archive import read_docker_archive
from shipyard.oci.basespec import BaseSource, BaseSpec, parse_base
from shipyard.oci.keys import base_fingerprint
from shipyard.oci.layer import BlobStore, layer_from_tarball
from shipyard.oci.layercheck import check_base_layers
from shipyard.oci.layout import find_images, read_layout
from shipyard.oci.mediatypes import is_index, is_manifest
from shipyard.oci.model import Config, Descriptor, History, Image, OCIError, Platform
from shipyard.oci.remote.reference import Reference

__all__ = ["DEFAULT_PATH", "Base", "EachOf", "base_fingerprint", "load_base"]

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Base:
    """A base image for one platform, with the name and manifest digest it came from."""

    image: Image
    name: str
    digest: str


def _used(path: Path, store: BlobStore) -> None:
    """Mark a blob of the store as used now (a prune removes the least recently used)."""
    if path.is_relative_to(store.root):
        with contextlib.suppress(OSError):  # another user's blob: it ages, and is fetched again
            os.utime(path)


def _from_rootfs(path: Path, platform: Platform, store: BlobStore) -> Base:
    layer = layer_from_tarball(path, store)
    image = Image(
        platform,
        (layer,),
        Config(env=(f"PATH={DEFAULT_PATH}",)),
        (History(created_by=f"rootfs {path.name}"),),
    )
    return Base(image, f"rootfs:{path.name}", "")


def _path(root: Path, source: BaseSource) -> Path:
    path = source.location(root).resolve()
    if not path.exists():
        raise UsageError(f"base image {source}: {path} does not exist; build or fetch it first")
    return path


def _from_source(
    source: BaseSource,
    missing: Sequence[Platform],
    root: Path,
    store: BlobStore,
    env: Mapping[str, str],
) -> dict[Platform, Base]:
    name = str(source)
    if source.kind == "oci-layout":
        layout = read_layout(_path(root, source), missing)
        return {p: Base(image, name, digest) for p, (image, digest) in layout.items()}
    if source.kind == "docker-archive":
        images = read_docker_archive(_path(root, source), store)
        return {p: Base(i, name, "") for p in missing for i in images if p.matches(i.platform)}
    if source.kind == "rootfs" and source.platform is not None:
        chosen = source.platform
        wants = [p for p in missing if p.matches(chosen)]
        if not wants:
            return {}
        return dict.fromkeys(wants, _from_rootfs(_path(root, source), chosen, store))
    assert source.reference is not None
    return _from_registry(source.reference, missing, store, env)


# How the layer checks of several bases run: `each_of(fn, items)` calls fn on each.
EachOf = Callable[[Callable[["Base"], None], Sequence["Base"]], object]


def load_base(
    base: str | BaseSpec,
    platforms: Sequence[str],
    *,
    root: Path,
    store: BlobStore,
    env: Mapping[str, str] | None = None,
    each_of: EachOf | None = None,
) -> dict[str, Base]:
    """The base image for each of `platforms` (`linux/arm64`, ...) from the base `base`.

    `base` is an `image.base` value, as text (parsed here) or parsed (`BaseSpec`).
    `each_of(fn, items)` runs the layer checks of the platforms' distinct layer chains
    (the build passes its job budget's map, so two platforms are checked at once when a
    slot is idle; zlib and sha256 release the GIL); by default one after another.
    """
    env = os.environ if env is None else env
    spec = parse_base(base) if isinstance(base, str) else base
    wanted = [Platform.parse(p) for p in platforms]
    found: dict[Platform, Base] = {}
    for source in spec.sources:
        missing = [p for p in wanted if p not in found]
        if missing:
            for platform, got in _from_source(source, missing, root, store, env).items():
                found.setdefault(platform, got)
    absent = [str(p) for p in wanted if p not in found]
    if absent:
        raise OCIError(f"base image {spec} has no image for {', '.join(absent)}")
    chains: dict[tuple[str, ...], Base] = {}
    for each in found.values():
        for layer in each.image.layers:
            _used(layer.path, store)
        chains.setdefault(tuple(layer.descriptor.digest for layer in each.image.layers), each)

    def check(each: Base) -> None:
        try:
            check_base_layers(each.image.layers, store)
        except OCIError as exc:  # the same type: an unsafe layer is bad input (exit 2)
            raise type(exc)(f"base image {each.name}: {exc}") from None

    (each_of or _one_by_one)(check, list(chains.values()))
    return {str(p): found[p] for p in wanted}


def _one_by_one(fn: Callable[[Base], None], items: Sequence[Base]) -> None:
    for item in items:
        fn(item)


def _from_registry(
    ref: Reference, wanted: Sequence[Platform], store: BlobStore, env: Mapping[str, str]
) -> dict[Platform, Base]:
    """Manifests from the registry every time (tags move); blobs only when not in the store.

    Indexes and manifests of either family come from /manifests/; everything else a
    manifest names (the config, OCI or Docker's `container.image.v1`, and the layers)
    is a blob, from /blobs/ into the store.
    """
    from shipyard.oci.remote.push import pull_registry  # the HTTP stack only for registry bases

    # A base registry is not a push target: only credentials configured for its own
    # host are sent there, never the global SHIPYARD_REGISTRY_USER pair.
    registry = pull_registry(ref.registry, env)
    data, media_type, digest = registry.get_manifest(ref.repository, ref.identifier)
    seen = {digest: data}

    def fetch(desc: Descriptor) -> bytes:
        if desc.digest not in seen:
            if is_index(desc.media_type) or is_manifest(desc.media_type):
                seen[desc.digest] = registry.get_manifest(ref.repository, desc.digest)[0]
            else:
                seen[desc.digest] = locate(desc).read_bytes()
        return seen[desc.digest]

    def locate(desc: Descriptor) -> Path:
        path = store.path(desc.digest)
        if not path.is_file() or path.stat().st_size != desc.size:
            path.parent.mkdir(parents=True, exist_ok=True)
            registry.pull_blob(ref.repository, desc.digest, path, size=desc.size)
        else:
            _used(path, store)
        return path

    top = Descriptor(media_type, digest, len(data))
    found = find_images([top], wanted, fetch, locate)
    return {p: Base(image, str(ref), manifest) for p, (image, manifest) in found.items()}
