"""The `image` builder: daemonless by default, the Docker engine for a Dockerfile.

The two builders are imported on first use, so commands that only plan (and
builds with no image actions) never load the OCI and HTTP modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shipyard.build.engine import Artifact, BuildContext, Outcome
from shipyard.build.plan import Action

if TYPE_CHECKING:
    from shipyard.build.dockerfile import DockerfileBuilder
    from shipyard.build.image import ImageBuilder

__all__ = ["ImageKinds"]


class ImageKinds:
    """The `image` builder: daemonless by default, the Docker engine for a Dockerfile."""

    kind = "image"

    def __init__(self) -> None:
        self._daemonless: ImageBuilder | None = None
        self._engine: DockerfileBuilder | None = None

    def _pick(self, action: Action) -> ImageBuilder | DockerfileBuilder:
        if action.image and action.image.dockerfile:
            if self._engine is None:
                from shipyard.build.dockerfile import DockerfileBuilder

                self._engine = DockerfileBuilder()
            return self._engine
        if self._daemonless is None:
            from shipyard.build.image import ImageBuilder

            self._daemonless = ImageBuilder()
        return self._daemonless

    def key(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> str:
        """The chosen builder's key."""
        return self._pick(action).key(action, ctx, deps)

    def build(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Outcome:
        """Build with the chosen builder."""
        return self._pick(action).build(action, ctx, deps)
