"""`docker load` tarballs of a built image, written on request from its OCI layout.

A build writes an image's OCI layout only (dist/images/<binary>/, its layer blobs
linked from where they already are); a tarball copies every blob of one platform's
image, base included, so it is written only when asked for: `shipyard load`, a
release's smoke run, or `write_archive` itself. It is the tarball the build used to
write: named `<binary>-<version>[-<variant>]-<os>_<arch>.tar` in dist/images/, tagged
`archive_tags` (tags of its own per platform), its entries sorted and normalised, so
the same layout gives the same bytes.
"""

from __future__ import annotations

import platform
from pathlib import Path

from shipyard import _json
from shipyard.builders.image.variants import DEFAULT, variant_layout
from shipyard.dist import image_archive, image_layout
from shipyard.errors import UsageError
from shipyard.oci.archive import archive_tags, write_docker_archive
from shipyard.oci.layout import REF_NAME, layout_tops, read_blob, read_layout
from shipyard.oci.model import OCIError, Platform

__all__ = ["ARCHIVE_EPOCH", "archive_path", "host_platform", "write_archive"]

ARCHIVE_EPOCH = 0
"""The time of every entry of a tarball: fixed, so a layout gives the same bytes."""
_VERSION = "org.opencontainers.image.version"
_ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm/v7"}


def host_platform() -> str:
    """This machine's platform as images name it (`linux/amd64`): the one Docker runs."""
    machine = platform.machine()
    return f"linux/{_ARCHITECTURES.get(machine, machine.lower())}"


def _version_and_tag(layout: Path) -> tuple[str, str]:
    """The version (the index's annotation) and tag (the layout's ref name) of an image."""
    (top, *_) = layout_tops(layout) or (None,)
    if top is None:
        raise OCIError(f"{layout}: index.json lists no image")
    ref = dict(top.annotations).get(REF_NAME, "")
    notes = _json.loads(read_blob(layout, top)).get("annotations") or {}
    version = str(notes.get(_VERSION) or ref)
    return version, ref or version.replace("+", "-")


def _layout(dist: Path, binary: str, variant: str) -> Path:
    """The layout of `variant` of `binary`'s image; UsageError when it is not built."""
    layout = variant_layout(image_layout(dist, binary), variant)
    if not (layout / "index.json").is_file():
        what = f"variant {variant} of {binary}" if variant else binary
        raise UsageError(f"no image of {what} in {layout}: build it first (shipyard build)")
    return layout


def _default_path(dist: Path, binary: str, version: str, variant: str, platform: str) -> Path:
    return image_archive(dist, binary, version + (f"-{variant}" if variant else ""), platform)


def archive_path(dist: Path, binary: str, platform: str, variant: str = DEFAULT) -> Path:
    """Where `write_archive` puts `variant`'s tarball for `platform` by default."""
    version, _ = _version_and_tag(_layout(dist, binary, variant))
    return _default_path(dist, binary, version, variant, platform)


def write_archive(
    dist: Path,
    binary: str,
    platform: str,
    *,
    variant: str = DEFAULT,
    dest: Path | None = None,
) -> tuple[Path, str]:
    """Write the `docker load` tarball of `binary`'s image (`variant`'s) for `platform`
    from its layout in `dist`, at `dest` (default: `archive_path`): its path and sha256.

    UsageError when the image is not built, or not for `platform`.
    """
    layout = _layout(dist, binary, variant)
    version, tag = _version_and_tag(layout)
    wanted = Platform.parse(platform)
    found = read_layout(layout, [wanted])
    if wanted not in found:
        raise UsageError(f"the image of {binary} in {layout} has no {platform} image")
    image, _ = found[wanted]
    target = dest or _default_path(dist, binary, version, variant, platform)
    tags = archive_tags(binary, tag, platform)
    sha256 = write_docker_archive(target, image, tags, ARCHIVE_EPOCH)
    return target, sha256
