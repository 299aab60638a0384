"""docker-archive tarballs: the format `docker save` writes and `docker load` reads.

A written archive holds one image: `manifest.json` (config, tags and layer file
names, which Docker reads), and, so that OCI tools read it too, `oci-layout`
and `index.json`; the blobs live under `blobs/sha256/` for both. Docker accepts
gzip layers in an archive, so layer blobs go in unchanged.

An image's tarballs are one per platform, and each carries tags of its own
(`archive_tags`): loading the amd64 and then the arm64 tarball keeps both, where
one shared `name:version` tag would silently move to the last one loaded.
"""

from __future__ import annotations

import os
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from shipyard import _json
from shipyard._fs import TEMP_PREFIX
from shipyard.oci.layer import BlobStore, Entry, HashingWriter, layer_from_tarball, write_tar
from shipyard.oci.layout import LAYOUT_VERSION, REF_NAME, image_blobs, image_from_json
from shipyard.oci.model import (
    Descriptor,
    Image,
    Layer,
    OCIError,
    canonical_json,
    config_descriptor,
    manifest_descriptor,
)

__all__ = ["archive_tags", "platform_suffix", "read_docker_archive", "write_docker_archive"]

_BLOBS = "blobs/sha256/"


def _name(digest: str) -> str:
    return _BLOBS + digest.partition(":")[2]


def platform_suffix(platform: str) -> str:
    """What a platform adds to a tag: `linux/amd64` -> `amd64`, `linux/arm/v7` -> `arm-v7`.

    Every platform shipyard builds is a Linux one, so the OS is left out.
    """
    os_name, _, rest = platform.partition("/")
    return (rest if os_name == "linux" else platform).replace("/", "-")


def archive_tags(name: str, tag: str, platform: str) -> list[str]:
    """The tags of `platform`'s tarball of the image `name`:`tag`, none shared with another
    platform's: `name:tag-amd64` first, then `name:tag-linux_amd64` (the older spelling).
    """
    short = f"{name}:{tag}-{platform_suffix(platform)}"
    return list(dict.fromkeys((short, f"{name}:{tag}-{platform.replace('/', '_')}")))


def write_docker_archive(path: Path, image: Image, tags: Sequence[str], epoch: int) -> str:
    """Write `image` as a tarball that `docker load` accepts, tagged `tags` (`name:tag`).

    The archive's entries are sorted and normalised like a layer's, so equal
    images give equal archives. Returns the archive's sha256 (hex).
    """
    entries: list[Entry] = []
    for digest, content in image_blobs(image).items():
        if isinstance(content, bytes):
            entries.append(Entry(_name(digest), data=content))
        else:
            entries.append(Entry(_name(digest), source=content))
    docker = [
        {
            "Config": _name(config_descriptor(image).digest),
            "RepoTags": list(tags),
            "Layers": [_name(layer.descriptor.digest) for layer in image.layers],
        }
    ]
    top = manifest_descriptor(image)
    notes = ((REF_NAME, tags[0].rpartition(":")[2]),) if tags else ()
    named = Descriptor(top.media_type, top.digest, top.size, top.platform, notes)
    index = {"schemaVersion": 2, "manifests": [named.to_json()]}
    entries += [
        Entry("manifest.json", data=canonical_json(docker)),
        Entry("index.json", data=canonical_json(index)),
        Entry("oci-layout", data=canonical_json(LAYOUT_VERSION)),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            sink = HashingWriter(handle)
            write_tar(entries, sink, epoch)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return sink.hash.hexdigest()


def read_docker_archive(path: Path, store: BlobStore) -> list[Image]:
    """The images in a `docker save` tarball; layers go into `store` (gzip, by digest).

    Plain layers are compressed once; the store remembers them by diff_id, so
    reading the same archive again copies nothing.
    """
    images: list[Image] = []
    try:
        with tarfile.open(path, "r:*") as tar:
            manifest = _json.loads(_member(tar, "manifest.json"))
            if not isinstance(manifest, list):
                raise TypeError("manifest.json is not a list")
            for entry in manifest:
                config = _json.loads(_member(tar, entry["Config"]))
                diff_ids = config["rootfs"]["diff_ids"]
                layers: list[Layer] = []
                for name, diff_id in zip(entry["Layers"], diff_ids, strict=True):
                    stream = tar.extractfile(name)
                    if stream is None:
                        raise OCIError(f"{path}: layer {name} is not a file")
                    layers.append(layer_from_tarball(stream, store, diff_id=diff_id))  # type: ignore[arg-type]
                doc = {"layers": [layer.descriptor.to_json() for layer in layers]}
                paths = {layer.descriptor.digest: layer.path for layer in layers}
                images.append(image_from_json(doc, config, _locator(paths)))
    except (OSError, tarfile.TarError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise OCIError(f"{path}: not a docker-archive tarball ({exc})") from None
    return images


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    stream = tar.extractfile(name)
    if stream is None:
        raise OCIError(f"{name} is not a file in the archive")
    return stream.read()


def _locator(paths: dict[str, Path]) -> Callable[[Descriptor], Path]:
    return lambda desc: paths[desc.digest]
