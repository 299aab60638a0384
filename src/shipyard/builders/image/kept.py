"""What a build of some of a binary's platforms keeps of the image already in dist/.

A build of some platforms (`--platform linux/arm64`) keeps the other platforms of
the image in dist/images/<binary>/ only when that image was built from the same
inputs but the platforms (`shipyard.oci.keep`): the key names the kept manifests
(`platform@digest`), and each is read back and checked to give the same bytes.
Each variant keeps the same platforms from its own layout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from shipyard import _json
from shipyard.builders.image.variants import VariantPlan, variant_layout
from shipyard.errors import ShipyardError
from shipyard.oci.keep import KEPT, kept_platforms
from shipyard.oci.layout import (
    blob_file,
    image_from_json,
    index_entries,
    layout_tops,
    manifest_blobs,
    read_blob,
)
from shipyard.oci.model import Image, OCIError, as_annotations, manifest_descriptor

__all__ = ["kept_images"]


def kept_images(
    layout: Path,
    inputs: Mapping[str, object],
    identity: str,
    plan: VariantPlan,
    platforms: Sequence[str],
) -> tuple[list[Image], dict[str, list[Image]]]:
    """The images a build keeps: the default's other platforms, as the key's `inputs`
    name them, and each variant's images of the same platforms (by name), read from
    `layout` built from the same inputs (`identity`)."""
    raw_kept = inputs.get(KEPT)
    kept = [str(k) for k in raw_kept] if isinstance(raw_kept, list) else []
    others = _read_kept(layout, kept)
    # Read before the default layout (and the variants' folders in it) is replaced.
    variants = {
        name: _kept_variant(layout, name, identity, platforms, kept)
        for name in plan.variants
        if not plan.collapsed(name)
    }
    return others, variants


def _read_kept(layout: Path, kept: Sequence[str]) -> list[Image]:
    """The images `kept` (`platform@digest`, from the key) names in `layout`, unchanged.

    Each is read back and checked to give the same manifest bytes; a layout that
    changed since the key was made fails the build rather than mixing images.
    """
    if not kept:
        return []
    wanted = {text.partition("@")[2]: text.partition("@")[0] for text in kept}
    images: list[Image] = []
    try:
        (top,) = layout_tops(layout)
        for entry in index_entries(read_blob(layout, top)):
            if entry.digest not in wanted:
                continue
            data = read_blob(layout, entry)
            doc = _json.loads(data)
            config = _json.loads(read_blob(layout, manifest_blobs(data)[0]))
            image = image_from_json(doc, config, lambda d: blob_file(layout, d))
            image = dataclasses.replace(
                image, annotations=as_annotations(doc.get("annotations") or {})
            )
            if manifest_descriptor(image).digest != entry.digest:
                raise OCIError(f"its {wanted[entry.digest]} manifest does not read back the same")
            images.append(image)
    except (OCIError, ValueError, TypeError) as exc:
        raise ShipyardError(
            f"{layout}: cannot keep its other platforms ({exc}); build every platform"
        ) from None
    if len(images) != len(wanted):
        raise ShipyardError(
            f"{layout} changed during the build: its {', '.join(sorted(wanted.values()))} "
            "image is gone; build again"
        )
    return images


def _kept_variant(
    layout: Path, name: str, identity: str, platforms: Sequence[str], kept: Sequence[str]
) -> list[Image]:
    """The images of variant `name` a subset build keeps: the same platforms the default
    keeps (`kept`), from the variant's layout built from the same inputs."""
    if not kept:
        return []
    folder = variant_layout(layout, name)
    found = kept_platforms(folder, identity, platforms)
    wanted = sorted(text.partition("@")[0] for text in kept)
    if sorted(p for p, _ in found) != wanted:
        raise ShipyardError(
            f"{folder}: the {name} variant lacks the {', '.join(wanted)} image(s) the default "
            "keeps (its folder changed since it was built); build every platform"
        )
    return _read_kept(folder, [f"{p}@{d}" for p, d in found])
