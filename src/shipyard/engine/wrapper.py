"""What wraps every builder: one key per action, the cache, and error translation.

As ko's caching builder wraps its builder, `Wrapped` wraps a `Builder`: it
computes the action's key once from the builder's declared inputs, restores a
cache hit or runs the builder and stores its artifacts, and turns whatever the
builder raised (a ShipyardError, an OSError) into one BuildError naming the
action and its log, with the exit code of the cause (2 for bad input).
Builders therefore neither hash nor translate errors themselves.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from shipyard.artifacts import Artifact
from shipyard.dist import action_log
from shipyard.engine.cache.restore import Declared, declared_outputs
from shipyard.engine.context import BuildContext, Builder, Outcome
from shipyard.engine.keys import ActionKey
from shipyard.engine.plan import Action
from shipyard.errors import BuildError, ShipyardError

__all__ = ["OutputCache", "Wrapped", "translated"]

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


class Wrapped:
    """A builder with the engine's cross-cutting behaviour: key, cache, error translation."""

    def __init__(
        self, inner: Builder, cache: OutputCache | None = None, *, force: bool = False
    ) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.cache = cache
        self.force = force

    def key(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> ActionKey:
        """The action's key, from the builder's declared inputs."""
        with translated(action, ctx):
            return ActionKey.of(self.kind, self.inner.inputs(action, ctx, deps))

    def run(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Outcome:
        """Restore on a cache hit (unless forced); otherwise build, and store."""
        key = self.key(action, ctx, deps)
        with translated(action, ctx):
            if self.cache is not None and not self.force:
                # Paths and artifacts the action makes: a cache refuses anything else
                # before writing (`declared.owns`); checked again here for any cache.
                declared = declared_outputs(action, ctx)
                restored = self.cache.restore(key.digest, ctx.root, declared)
                if restored is not None:
                    # A builder may check what it alone can read (a test stage's JUnit
                    # file): an entry it refuses is a miss, built again.
                    check = getattr(self.inner, "restored_ok", None)
                    sound = check is None or check(action, ctx, restored)
                    if sound and all(declared.owns(a) for a in restored):
                        return Outcome(key.digest, restored, cached=True)
                    _logger.warning(
                        "cache entry %s describes outputs %s does not make; building it instead",
                        key.digest,
                        action.id,
                    )
            # A log left by an earlier build would be named in this build's failure.
            action_log(ctx.dist, action.kind, action.names).unlink(missing_ok=True)
            outputs = self.inner.build(action, ctx, deps, key)
            if self.cache is not None:
                self.cache.store(key.digest, outputs, ctx.root)
        return Outcome(key.digest, outputs, _log(action, ctx))
