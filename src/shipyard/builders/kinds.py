"""The `image` builder: daemonless by default, the Docker engine for a Dockerfile.

The two builders are imported on first build, so commands that only plan, and
builds whose image actions are all cached, never load the OCI, tar and HTTP
modules: the keys are computed here, from light modules only.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard import __version__
from shipyard.engine.plan import Action
from shipyard.engine.scheduler import Artifact, BuildContext, Outcome
from shipyard.engine.sources import tree_hash
from shipyard.errors import BuildError, UsageError
from shipyard.manifest import Image as ImageSettings
from shipyard.oci.keys import GZIP_LEVEL, base_fingerprint

if TYPE_CHECKING:
    from shipyard.builders.image import ImageBuilder
    from shipyard.builders.image.dockerfile import DockerfileBuilder

__all__ = [
    "ImageKinds",
    "daemonless_key",
    "dockerfile_key",
    "dockerfile_path",
    "image_settings",
    "source_url",
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

    def key(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> str:
        """The chosen builder's key, without loading the builder."""
        if _uses_engine(action):
            return dockerfile_key(action, ctx, deps)
        return daemonless_key(action, ctx, deps, level=GZIP_LEVEL)

    def build(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Outcome:
        """Build with the chosen builder."""
        return self._pick(action).build(action, ctx, deps)


def _uses_engine(action: Action) -> bool:
    return bool(action.image and action.image.dockerfile)


def image_settings(action: Action) -> ImageSettings:
    """The action's image settings, the defaults when the binary declares none."""
    return action.image if action.image is not None else ImageSettings()


def source_url(action: Action, ctx: BuildContext) -> str:
    """The image's source label: $SHIPYARD_SOURCE_URL (CI sets it), else the
    repository-relative source, which is the same in every checkout."""
    if ctx.env.get("SHIPYARD_SOURCE_URL"):
        return ctx.env["SHIPYARD_SOURCE_URL"]
    return (
        action.source.relative_to(ctx.root).as_posix()
        if action.source.is_relative_to(ctx.root)
        else action.source.name
    )


def _settings_text(settings: ImageSettings) -> str:
    # Hubs and tags say where to push, not what to build: they stay out of the key.
    # Not dataclasses.asdict: the manifest's mappings are read-only proxies it cannot copy.
    names = [f.name for f in dataclasses.fields(settings) if f.name not in ("hubs", "tags")]
    values = {name: getattr(settings, name) for name in names}
    return repr(
        sorted((k, sorted(v.items()) if isinstance(v, Mapping) else v) for k, v in values.items())
    )


def daemonless_key(
    action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], *, level: int
) -> str:
    """The wheel, platforms, entry point, image settings, base, clock and versions."""
    settings = image_settings(action)
    parts = [
        "image",
        __version__,
        str(level),
        *(a.sha256 for a in deps),
        *action.platforms,
        action.entrypoint,
        _settings_text(settings),
        base_fingerprint(settings.base or "", ctx.root),
        ctx.python,
        ctx.stamp.version,
        ctx.stamp.revision or "",
        str(ctx.stamp.epoch),
        source_url(action, ctx),
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def dockerfile_path(action: Action, ctx: BuildContext) -> Path:
    """The action's Dockerfile, which must be a file inside the repository."""
    assert action.image is not None and action.image.dockerfile
    path = (ctx.root / action.image.dockerfile).resolve()
    if not path.is_relative_to(ctx.root) or not path.is_file():
        raise BuildError(action.id, f"no Dockerfile at {action.image.dockerfile}")
    return path


def dockerfile_key(action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> str:
    """The Dockerfile's folder, the wheel, platforms, settings, clock and versions."""
    dockerfile = dockerfile_path(action, ctx)
    try:
        return tree_hash(
            dockerfile.parent,
            "dockerfile",
            __version__,
            ctx.stamp.version,
            str(ctx.stamp.epoch),
            dockerfile.name,
            ",".join(action.platforms),
            *(a.sha256 for a in deps),
            repr(action.image),
            root=ctx.root,
            git=ctx.git,
        )
    except UsageError as exc:  # a hostile build context: bad input, exit 2
        raise BuildError(action.id, str(exc)) from exc
