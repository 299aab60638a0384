"""The layers that wrap every builder: the key, the cache, and error translation.

As ko wraps its builders (a caching builder, a limiter), each layer implements the
same small protocol (`Runner`) around the one inside it: `Keyed` computes the
action's key once from the builder's declared inputs and builds with it; `Cached`
restores a hit or lets the inner layer build and stores its artifacts; `Translated`
turns whatever the layers inside raised (a ShipyardError, an OSError) into one
BuildError naming the action and its log, with the exit code of the cause (2 for
bad input). `shipyard.engine.run.wrapped` composes them, in one place. Builders
therefore neither hash, cache nor translate errors themselves.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from shipyard.artifacts import Artifact
from shipyard.dist import action_log
from shipyard.engine.cache.checks import Declared, declared_outputs
from shipyard.engine.context import BuildContext, Builder, Outcome
from shipyard.engine.keys import ActionKey
from shipyard.engine.plan import Action
from shipyard.errors import BuildError, ShipyardError

__all__ = ["Cached", "Keyed", "OutputCache", "Runner", "Translated", "translated"]

_logger = logging.getLogger(__name__)


class OutputCache(Protocol):
    """What the wrapper needs of a cache."""

    def restore(
        self, key: str, repo: Path, declared: Declared | None = None
    ) -> tuple[Artifact, ...] | None:
        """Put a hit's outputs in place under `repo`, only where `declared` allows
        (default: dist/); None on a miss."""
        ...

    def store(self, key: str, outputs: tuple[Artifact, ...], repo: Path) -> None:
        """Record the outputs of the action `key`."""
        ...


def _log(action: Action, ctx: BuildContext) -> Path | None:
    path = action_log(ctx.dist, action.kind, action.names)
    return path if path.is_file() else None


@contextlib.contextmanager
def translated(action: Action, ctx: BuildContext) -> Iterator[None]:
    """Turn a ShipyardError or OSError raised in the block into a BuildError for `action`.

    A BuildError passes unchanged (a part of the action, say one platform's
    install, raised it with its own log). The cause stays attached, so the exit
    code is the cause's.
    """
    try:
        yield
    except BuildError:
        raise
    except (ShipyardError, OSError) as exc:
        raise BuildError(action.id, str(exc), log=_log(action, ctx)) from exc


class Runner(Protocol):
    """What the scheduler runs for each action: a builder inside the engine's layers."""

    kind: str

    def key(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> ActionKey:
        """The action's key, from the builder's declared inputs."""
        ...

    def run(
        self,
        action: Action,
        ctx: BuildContext,
        deps: tuple[Artifact, ...],
        key: ActionKey | None = None,
    ) -> Outcome:
        """Run `action` (its `key` computed when not given); what it made or restored."""
        ...


class Keyed:
    """The key layer: the action's key, computed once from the builder's declared
    inputs and handed to its `build`."""

    def __init__(self, inner: Builder) -> None:
        self.inner = inner
        self.kind = inner.kind

    def key(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> ActionKey:
        """The action's key, from the builder's declared inputs."""
        return ActionKey.of(self.kind, self.inner.inputs(action, ctx, deps))

    def run(
        self,
        action: Action,
        ctx: BuildContext,
        deps: tuple[Artifact, ...],
        key: ActionKey | None = None,
    ) -> Outcome:
        """Build `action` with its key; its outputs and its log."""
        key = key or self.key(action, ctx, deps)
        # A log left by an earlier build would be named in this build's failure.
        action_log(ctx.dist, action.kind, action.names).unlink(missing_ok=True)
        outputs = self.inner.build(action, ctx, deps, key)
        return Outcome(key.digest, outputs, _log(action, ctx))

    def restored_ok(
        self, action: Action, ctx: BuildContext, restored: tuple[Artifact, ...]
    ) -> bool:
        """Whether the builder takes what a cache restored (a test stage checks its JUnit
        file, which it alone can read); True for builders that check nothing."""
        check = getattr(self.inner, "restored_ok", None)
        return check is None or bool(check(action, ctx, restored))


class Cached:
    """The cache layer, as ko's caching builder: a hit is restored (unless forced);
    otherwise the inner layer builds with the same key, and its outputs are stored."""

    def __init__(self, inner: Keyed, cache: OutputCache, *, force: bool = False) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.cache = cache
        self.force = force

    def key(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> ActionKey:
        """The inner layer's key."""
        return self.inner.key(action, ctx, deps)

    def run(
        self,
        action: Action,
        ctx: BuildContext,
        deps: tuple[Artifact, ...],
        key: ActionKey | None = None,
    ) -> Outcome:
        """Restore on a cache hit (unless forced); otherwise build, and store."""
        key = key or self.key(action, ctx, deps)
        hit = None if self.force else self._restored(action, ctx, key)
        if hit is not None:
            return hit
        outcome = self.inner.run(action, ctx, deps, key)
        self.cache.store(key.digest, outcome.outputs, ctx.root)
        return outcome

    def _restored(self, action: Action, ctx: BuildContext, key: ActionKey) -> Outcome | None:
        # Paths and artifacts the action makes: a cache refuses anything else before
        # writing (`declared.owns`); checked again here for any cache.
        declared = declared_outputs(action, ctx)
        restored = self.cache.restore(key.digest, ctx.root, declared)
        if restored is None:
            return None
        # A builder may check what it alone can read: an entry it refuses is a miss.
        if self.inner.restored_ok(action, ctx, restored) and all(
            declared.owns(a) for a in restored
        ):
            return Outcome(key.digest, restored, cached=True)
        _logger.warning(
            "cache entry %s describes outputs %s does not make; building it instead",
            key.digest,
            action.id,
        )
        return None


class Translated:
    """The error-translation layer: whatever the layers inside raise (a ShipyardError,
    an OSError) becomes one BuildError naming the action and its log (`translated`)."""

    def __init__(self, inner: Runner) -> None:
        self.inner = inner
        self.kind = inner.kind

    def key(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> ActionKey:
        """The inner layers' key, errors translated."""
        with translated(action, ctx):
            return self.inner.key(action, ctx, deps)

    def run(
        self,
        action: Action,
        ctx: BuildContext,
        deps: tuple[Artifact, ...],
        key: ActionKey | None = None,
    ) -> Outcome:
        """Run the inner layers, errors translated."""
        with translated(action, ctx):
            return self.inner.run(action, ctx, deps, key)
