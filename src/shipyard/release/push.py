"""`shipyard push`: the images the last build made, to every hub of their binaries.

Every image of the selection (each binary's default image and its variants) is read
and checked before the first is pushed: a missing image, a missing declared platform
(unless partial pushes are allowed) or a protected hub outside CI stops the push with
nothing sent, so all of them go or none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from shipyard.artifacts import select
from shipyard.builders.image.variants import DEFAULT, variant_layout, variant_of
from shipyard.dist import dist_dir, image_layout, report_file
from shipyard.engine.plan import Plan
from shipyard.engine.report import read_artifacts
from shipyard.errors import UsageError
from shipyard.manifest import Binary
from shipyard.oci.remote.push import (
    LayoutImage,
    Publisher,
    PushResult,
    read_layout_image,
    require_platforms,
)
from shipyard.release.rails import check_protected

__all__ = ["Ready", "push_built", "ready_images"]


@dataclass(frozen=True)
class Ready:
    """One image checked and ready to push: its binary, variant ("" the default) and
    layout."""

    binary: Binary
    variant: str
    image: LayoutImage


def ready_images(plan: Plan, *, allow_partial: bool = False) -> list[Ready]:
    """The selected binaries' images in dist/, each checked: the default first, then
    each of `image.variants`. UsageError (exit 2) names the first that cannot go."""
    root = plan.manifest.root
    dist = dist_dir(root)
    built = read_artifacts(report_file(dist), root) or ()
    ready: list[Ready] = []
    for binary in plan.binaries:
        if "image" not in binary.outputs:
            continue
        # The image the last build reported; else where the image builder writes it.
        images = [a for a in select(built, kind="image", binary=binary.name) if not variant_of(a)]
        layout = images[0].path.parent if images else image_layout(dist, binary.name)
        for variant in (DEFAULT, *sorted(binary.image.variants)):
            folder = variant_layout(layout, variant)
            if not (folder / "index.json").is_file():
                what = f"{variant} variant image" if variant else "image"
                raise UsageError(
                    f"{binary.name}: no {what} in {folder}; run `shipyard build "
                    f"--binary={binary.name} --output=image` first"
                )
            image = read_layout_image(folder)
            if not allow_partial:
                require_platforms(binary.name, folder, image, binary.image_platforms)
            ready.append(Ready(binary, variant, image))
    return ready


def push_built(
    plan: Plan,
    env: Mapping[str, str],
    *,
    tags: Sequence[str] = (),
    allow_partial: bool = False,
    force_protected: bool = False,
    on_step: Callable[[str], None] = lambda _: None,
) -> list[PushResult]:
    """Push every selected binary's images to every hub, with `tags` (default: each
    binary's image.tags; a variant's suffixed -<variant>). Nothing is pushed unless
    every image and hub passes its checks; UsageError when no binary has an image."""
    ready = ready_images(plan, allow_partial=allow_partial)
    # Protected hubs are refused before anything is pushed, as missing platforms are.
    check_protected(
        list({r.binary.name: r.binary for r in ready}.values()),
        env,
        force=force_protected,
        command="push",
    )
    publisher = Publisher(on_step=on_step)
    pushed: list[PushResult] = []
    for item in ready:
        binary = item.binary
        # One variant equal to the default has its digest, so only its tags move.
        pushed += publisher.push(
            binary.name,
            item.image,
            binary.image.hubs,
            tuple(tags) or binary.image.tags,
            variant=item.variant,
        )
    if not pushed:
        raise UsageError("nothing to push: no selected binary has an image output")
    return pushed
