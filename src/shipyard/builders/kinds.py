"""The `image` builder: daemonless by default, the Docker engine for a Dockerfile.

The two builders are imported on first build, so commands that only plan, and
builds whose image actions are all cached, never load the OCI, tar and HTTP
modules: the keys are computed here, from light modules only.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard import __version__
from shipyard._environ import SOURCE_URL
from shipyard.artifacts import Artifact, select
from shipyard.builders.locks import lock_inputs
from shipyard.engine.context import BuildContext
from shipyard.engine.keys import ActionKey, Inputs, Value
from shipyard.engine.plan import Action
from shipyard.errors import ShipyardError, UsageError
from shipyard.files.sources import tree_hash
from shipyard.manifest import Image as ImageSettings
from shipyard.oci.keys import GZIP_LEVEL, base_fingerprint

if TYPE_CHECKING:
    from shipyard.builders.image import ImageBuilder
    from shipyard.builders.image.dockerfile import DockerfileBuilder

__all__ = [
    "ImageKinds",
    "check_entrypoint",
    "daemonless_inputs",
    "dockerfile_inputs",
    "dockerfile_path",
    "image_settings",
    "own_wheels",
    "source_url",
    "stamp_inputs",
    "wheel_digests",
]


class ImageKinds:
    """The `image` builder: daemonless by default, the Docker engine for a Dockerfile."""

    kind = "image"

    def __init__(self) -> None:
        self._daemonless: ImageBuilder | None = None
        self._engine: DockerfileBuilder | None = None

    def _pick(self, action: Action) -> ImageBuilder | DockerfileBuilder:
        if _uses_engine(action):
            if self._engine is None:
                from shipyard.builders.image.dockerfile import DockerfileBuilder

                self._engine = DockerfileBuilder()
            return self._engine
        if self._daemonless is None:
            from shipyard.builders.image import ImageBuilder

            self._daemonless = ImageBuilder()
        return self._daemonless

    def inputs(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Inputs:
        """The chosen builder's declared inputs, without loading the builder."""
        if _uses_engine(action):
            return dockerfile_inputs(action, ctx, deps)
        from shipyard.dist import image_layout
        from shipyard.oci.keep import with_kept  # light: what a subset build keeps

        inputs = daemonless_inputs(action, ctx, deps, level=GZIP_LEVEL)
        return with_kept(inputs, image_layout(ctx.dist, action.binaries[0]), action.platforms)

    def build(
        self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], key: ActionKey
    ) -> tuple[Artifact, ...]:
        """Build with the chosen builder."""
        return self._pick(action).build(action, ctx, deps, key)


def _uses_engine(action: Action) -> bool:
    return bool(action.image and action.image.dockerfile)


def image_settings(action: Action) -> ImageSettings:
    """The action's image settings, the defaults when the binary declares none."""
    return action.image if action.image is not None else ImageSettings()


def source_url(action: Action, ctx: BuildContext) -> str:
    """The image's source label: $SHIPYARD_SOURCE_URL (CI sets it), else the
    repository-relative source, which is the same in every checkout."""
    if ctx.env.get(SOURCE_URL.name):
        return ctx.env[SOURCE_URL.name]
    return (
        action.source.relative_to(ctx.root).as_posix()
        if action.source.is_relative_to(ctx.root)
        else action.source.name
    )


def check_entrypoint(entrypoint: str, binary: str, site: Path, platform: str = "") -> None:
    """Fail (exit 2) when `module:attr` is not in the resolved `site`, as a zipapp and an
    image both do (`shipyard.entrypoints`: read from the files, never imported)."""
    from shipyard.entrypoints import entrypoint_problem

    problem = entrypoint_problem(entrypoint, [site], f"{binary}'s wheel or its dependencies")
    if problem:
        on = f" ({platform})" if platform else ""
        raise UsageError(
            f"entrypoint {entrypoint}: {problem}{on}; fix the entrypoint in binaries.yaml, "
            "or add the dependency that has it"
        )


def wheel_digests(deps: tuple[Artifact, ...]) -> list[str]:
    """The sha256 of each wheel among an action's inputs, sorted."""
    return sorted(a.sha256 for a in select(deps, kind="wheel"))


def own_wheels(action: Action, deps: tuple[Artifact, ...]) -> list[Artifact]:
    """The wheels an action installs, the binary's own first, then its in-repository
    libraries'. The own one is the wheel of `action.project`; without a project
    there must be exactly one wheel. ShipyardError otherwise."""
    wheels = list(select(deps, kind="wheel"))
    if not action.project:
        if len(wheels) != 1:
            raise ShipyardError(
                f"expected the wheel of {action.source} among the inputs, got {len(wheels)}"
            )
        return wheels
    own = [w for w in wheels if w.metadata.wheel and _key(w.metadata.wheel.name) == action.project]
    if len(own) != 1:
        raise ShipyardError(
            f"expected one wheel of project {action.project} among the inputs, got {len(own)}"
        )
    return own + [w for w in wheels if w is not own[0]]


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def stamp_inputs(ctx: BuildContext) -> dict[str, Value]:
    """The build stamp as key inputs: version, revision, dirty flag and clock."""
    stamp = ctx.stamp
    return {
        "version": stamp.version,
        "revision": stamp.revision,
        "dirty": stamp.dirty,
        "epoch": stamp.epoch,
    }


# Where to push and who may push: not what is built, so not in the key.
_PUSH_ONLY = ("hubs", "tags", "protected", "movable_tags")


def _settings(settings: ImageSettings) -> dict[str, Value]:
    """The image settings as JSON for the key: every field but where to push.

    Not dataclasses.asdict: the manifest's mappings are read-only proxies it cannot
    copy, and a variant (a dataclass) becomes {base, env} (and its python when it has
    one), sorted by name.
    """
    out: dict[str, Value] = {}
    for f in dataclasses.fields(settings):
        if f.name in _PUSH_ONLY:
            continue
        value = getattr(settings, f.name)
        if f.name == "variants":
            out[f.name] = {
                name: {
                    "base": v.base,
                    "env": dict(sorted(v.env.items())),
                    # A per-Python variant's site is resolved for its Python.
                    **({"python": v.python} if v.python else {}),
                }
                for name, v in sorted(value.items())
            }
        elif isinstance(value, Mapping):
            out[f.name] = dict(value)
        elif isinstance(value, tuple):
            out[f.name] = list(value)
        else:
            out[f.name] = value
    return out


def _variant_bases(settings: ImageSettings, root: Path) -> dict[str, Value]:
    """Each variant base but the image's own, by what its content is (`base_fingerprint`)."""
    bases = {v.base for v in settings.variants.values() if v.base and v.base != settings.base}
    return {base: base_fingerprint(base, root) for base in sorted(bases)}


def daemonless_inputs(
    action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], *, level: int
) -> Inputs:
    """The wheel, platforms, entry point, image settings, base, clock and versions."""
    settings = image_settings(action)
    return {
        "builder": "daemonless",
        "shipyard": __version__,
        "gzip_level": level,
        "wheels": wheel_digests(deps),
        "platforms": list(action.platforms),
        "entrypoint": action.entrypoint,
        "extras": list(action.extras),
        "settings": _settings(settings),
        "base": base_fingerprint(settings.base or "", ctx.root),
        "variant_bases": _variant_bases(settings, ctx.root),
        "lock": lock_inputs(action, ctx),
        "python": ctx.python,
        "stamp": stamp_inputs(ctx),
        "source_url": source_url(action, ctx),
    }


def dockerfile_path(action: Action, ctx: BuildContext) -> Path:
    """The action's Dockerfile, which must be a file inside the repository."""
    assert action.image is not None and action.image.dockerfile
    path = (ctx.root / action.image.dockerfile).resolve()
    if not path.is_relative_to(ctx.root) or not path.is_file():
        raise UsageError(f"no Dockerfile at {action.image.dockerfile}")
    return path


def dockerfile_inputs(action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Inputs:
    """The Dockerfile's folder, the wheel, platforms, settings (with the Dockerfile's
    path), clock and versions.

    A hostile build context (a symlink out of the repository) fails here as bad input.
    """
    dockerfile = dockerfile_path(action, ctx)
    return {
        "builder": "dockerfile",
        "shipyard": __version__,
        "context": tree_hash(dockerfile.parent, root=ctx.root, git=ctx.git, memo=ctx.digests),
        "wheels": wheel_digests(deps),
        "platforms": list(action.platforms),
        "settings": _settings(image_settings(action)),
        "stamp": stamp_inputs(ctx),
    }
