"""An image's outputs: its OCI layout in dist/images/<binary>/.

The layout's index.json is the `image` artifact (the index digest, the per-platform
manifests and what each platform installed), the layout's other files are
`image-layout` artifacts. Each variant of the image is a layout of its own in
`variants/<name>/` of that folder. Layer blobs are linked from where they already
are (the blob store, a base layout), never copied when the file system allows a
link. `docker load` tarballs, which copy every blob, are written only on request,
from the layout (`archives`).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from shipyard._fs import sha256_file
from shipyard.artifacts import ANY, Artifact, ImageIndex, Installed, Metadata, PlatformManifest
from shipyard.builders.image.assembly import BASE_ANNOTATIONS
from shipyard.builders.image.variants import DEFAULT, VARIANTS_DIR, variant_layout
from shipyard.dist import image_layout, temp_prefix
from shipyard.engine.context import BuildContext
from shipyard.oci.layout import replace_dir, write_layout
from shipyard.oci.model import Descriptor, Image, Index, make_index, manifest_descriptor

__all__ = ["VariantImages", "write_images"]


VariantImages = tuple[Mapping[str, Image], Sequence[Image], bool]
"""A variant's images by platform, the images it keeps, and whether it is the default."""


def write_images(
    binary: str,
    ctx: BuildContext,
    images: Mapping[str, Image],
    installed: tuple[Installed, ...] | None,
    *,
    kept: Sequence[Image] = (),
    notes: Mapping[str, str] | None = None,
    variants: Mapping[str, VariantImages] | None = None,
    variant_installed: Mapping[str, tuple[Installed, ...]] | None = None,
) -> tuple[Artifact, ...]:
    """Write the index of `images` as dist/images/<binary>/.

    The index also lists `kept`, other platforms' images already in the layout.
    `notes` go on the layout's index.json entry,
    not into the index: what the local copy was built from is never pushed. The
    layout's index.json is the `image` artifact, with the index digest, the
    per-platform manifests and `installed` (None: not known) as its metadata; the
    layout's other files are `image-layout` artifacts.

    Each of `variants` is written the same way into `variants/<name>/` of that
    folder, tagged with the version suffixed `-<name>`; a variant that is the
    default gets the default's index. The folder with every variant is built aside
    and renamed into place at once (the kept images' blobs are read from the folder
    it replaces). The
    default's artifacts come first. A variant resolved for another Python has its
    own `variant_installed` (by name); the others share `installed`.
    """
    mine_of = dict(variant_installed or {})
    every = {DEFAULT: (images, kept, False), **(variants or {})}
    layout = image_layout(ctx.dist, binary)
    tops = _write_layouts(layout, binary, ctx.stamp.tag, every, notes)
    outputs: list[Artifact] = []
    for name in sorted(every):
        top, index = tops[name]
        outputs += _layout_artifacts(
            binary, variant_layout(layout, name), top, index, mine_of.get(name, installed)
        )
    return tuple(outputs)


def _write_layouts(
    layout: Path,
    binary: str,
    tag: str,
    every: Mapping[str, VariantImages],
    notes: Mapping[str, str] | None,
) -> dict[str, tuple[Descriptor, Index]]:
    """Write the index of each variant of `every` (tagged `tag`, suffixed) into `layout`:
    its top descriptor and index, by variant. The folder with every variant is built
    aside and renamed into place at once."""
    layout.parent.mkdir(parents=True, exist_ok=True)
    aside = Path(tempfile.mkdtemp(prefix=f"{temp_prefix()}{binary}.", dir=layout.parent))
    tops: dict[str, tuple[Descriptor, Index]] = {}
    try:
        for name, (their, their_kept, _) in every.items():
            first = dict(next(iter(their.values())).annotations)
            index_notes = {k: v for k, v in first.items() if not k.startswith(BASE_ANNOTATIONS)}
            index = make_index([*their.values(), *their_kept], index_notes)
            folder = variant_layout(aside / binary, name)
            ref = tag + _suffix(name)
            tops[name] = (write_layout(folder, index, ref=ref, notes=notes), index)
        replace_dir(aside / binary, layout)
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    return tops


def _suffix(variant: str) -> str:
    return f"-{variant}" if variant else ""


def _layout_artifacts(
    binary: str,
    layout: Path,
    top: Descriptor,
    index: Index,
    installed: tuple[Installed, ...] | None,
) -> list[Artifact]:
    """The layout's index.json as the `image` artifact, then its other files (not those
    of the variants' layouts inside it) as `image-layout` ones."""
    manifests = tuple(
        PlatformManifest(str(d.platform), d.digest, d.size)
        for d in (manifest_descriptor(image) for image in index.images)
    )
    about = ImageIndex(top.digest, top.media_type, top.size, manifests)
    nested = layout / VARIANTS_DIR
    files = sorted(
        (p for p in layout.rglob("*") if p.is_file() and not p.is_relative_to(nested)),
        key=lambda p: (p.parent != layout, p),
    )
    return [
        _artifact(p, binary, Metadata(installed=installed, image=about))
        if p.name == "index.json" and p.parent == layout
        else _artifact(p, binary, None)
        for p in files
    ]  # index.json and oci-layout first, then blobs


def _artifact(path: Path, binary: str, metadata: Metadata | None) -> Artifact:
    # Blobs are named by their sha256: no need to read them again.
    named = path.parent.name == "sha256" and len(path.name) == 64
    sha256 = path.name if named else sha256_file(path)
    kind = "image" if metadata is not None else "image-layout"
    return Artifact(kind, binary, ANY, path, sha256, path.stat().st_size, metadata or Metadata())
