"""Image variants: the image built again on another base or with more env, side by side.

`image.variants` maps a name to a base and env overrides (Istio's `debug` and
`distroless`). A variant is the default image's layers (the same resolved site,
the same dependency, library and app blobs) on the variant's base, with the
image's env and then the variant's env in its config. A variant whose effective
base and env equal the default's collapses into the default build: its layout
holds the very same index (same digest) and only its suffixed tags differ.
Variants equal to each other are built once, too.

With several target Pythons (project.python a list) and `${python}` in image.base,
the manifest adds a variant per other Python (`python3.12`, and `debug-python3.12`
for a declared `debug` whose base uses `${python}`): the same machinery builds,
names, tags (`1.4.0-python3.12`) and pushes them, with the site resolved for that
Python (its own dependency, library and app layers).

Every variant has a layout of its own in `variants/<name>/` inside the default
layout's folder (dist/images/<binary>/variants/debug/): a binary's images stay
under the one folder the cache restores and the stage copies for it, and no
variant name can collide with another binary's folder (a binary `mesh` with a
variant `agent` next to a binary `mesh-agent`). Readers of the default layout
look only at its index.json and blobs/, so the extra folder is invisible to
them. Tags are the image's tags suffixed `-<name>` (`1.4.0-debug`,
`latest-distroless`), docker-archive tarballs (written on request, `archives`)
`dist/images/<binary>-<version>-<name>-<os>_<arch>.tar`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from shipyard.artifacts import Artifact
from shipyard.errors import ShipyardError
from shipyard.manifest import Image as ImageSettings

__all__ = [
    "DEFAULT",
    "VARIANTS_DIR",
    "Flavour",
    "VariantPlan",
    "plan_variants",
    "variant_layout",
    "variant_of",
]

DEFAULT = ""  # the default image's variant name: no suffix
VARIANTS_DIR = "variants"


@dataclass(frozen=True)
class Flavour:
    """One distinct image to build: a base and the env the image config gets from the
    manifest (the image's env with a variant's merged over it)."""

    base: str
    env: tuple[tuple[str, str], ...]
    # The target Python its site is resolved for; "" the image's (the first).
    python: str = ""

    @property
    def env_map(self) -> dict[str, str]:
        """The env as a mapping, in manifest order."""
        return dict(self.env)


@dataclass(frozen=True)
class VariantPlan:
    """What an image action builds: the distinct flavours (the default's first) and,
    for the default ("") and each variant, the flavour it gets."""

    flavours: tuple[Flavour, ...]
    chosen: tuple[tuple[str, int], ...]  # (variant name, index into flavours)

    def flavour(self, variant: str) -> Flavour:
        """The flavour `variant` ("" for the default) is built as."""
        return self.flavours[dict(self.chosen)[variant]]

    @property
    def variants(self) -> tuple[str, ...]:
        """The variants' names, sorted (the default left out)."""
        return tuple(name for name, _ in self.chosen if name != DEFAULT)

    def collapsed(self, variant: str) -> bool:
        """Whether `variant` is the default image itself (same base and env)."""
        return dict(self.chosen)[variant] == 0


def plan_variants(settings: ImageSettings) -> VariantPlan:
    """The flavours of `settings`: the default, then each variant that differs from
    every flavour before it (same base text and same effective env: the same image).

    A variant without a base takes the image's; its env is merged over the image's. A
    per-Python variant (`python3.12`, made by the manifest from a list of target
    Pythons) is its own flavour: its site is resolved for its Python.
    ShipyardError when the image has no base (set image.base).
    """
    if not settings.base:
        raise ShipyardError("no base image (set image.base)")
    default = Flavour(settings.base, tuple(settings.env.items()))
    flavours = [default]
    chosen = [(DEFAULT, 0)]
    for name in sorted(settings.variants):
        variant = settings.variants[name]
        env = {**settings.env, **variant.env}
        flavour = Flavour(variant.base or settings.base, tuple(env.items()), variant.python or "")
        for i, known in enumerate(flavours):
            # Env order does not change an image's meaning: compare as mappings.
            if (known.base, known.python) == (flavour.base, flavour.python) and (
                known.env_map == flavour.env_map
            ):
                chosen.append((name, i))
                break
        else:
            chosen.append((name, len(flavours)))
            flavours.append(flavour)
    return VariantPlan(tuple(flavours), tuple(chosen))


def variant_layout(layout: Path, variant: str) -> Path:
    """The OCI layout folder of `variant` of the image whose default layout is `layout`."""
    return layout if variant == DEFAULT else layout / VARIANTS_DIR / variant


def variant_of(artifact: Artifact) -> str:
    """The variant an `image` artifact (a layout's index.json) is: "" for the default.

    The one place that knows where a variant's layout sits (`variant_layout`).
    """
    folder = artifact.path.parent
    return folder.name if folder.parent.name == VARIANTS_DIR else DEFAULT


def no_dockerfile_variants(binary: str, variants: Mapping[str, object]) -> None:
    """Refuse variants of a Dockerfile image: the engine builds one image per platform."""
    if variants:
        from shipyard.errors import BuildError

        raise BuildError(
            f"image {binary}",
            f"image.variants ({', '.join(sorted(variants))}) are built only by the daemonless "
            "builder: a Dockerfile image (image.dockerfile) cannot take another base; remove "
            "image.variants, or build the variant from its own Dockerfile as another binary",
        )
