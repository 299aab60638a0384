"""What a builder sees and implements: the build context, the job budget, the protocol.

Builders import from here (or through `shipyard.engine.scheduler`, which
re-exports it): the context of a build, `map_parts` for the parts of an action
that may run at once, and the `Builder` protocol. A builder declares its key's
inputs and builds; the engine computes the key, caches, times and translates
errors around it (`shipyard.engine.wrapper`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from shipyard.artifacts import Artifact
from shipyard.dist import logs_dir
from shipyard.engine.keys import ActionKey, Inputs
from shipyard.engine.plan import Action
from shipyard.files.sources import GitIgnored
from shipyard.files.statcache import StatMemo
from shipyard.stamp import Stamp

if TYPE_CHECKING:
    from shipyard.workspace import Workspace

__all__ = ["BuildContext", "Builder", "Outcome", "Slots", "map_parts"]

_T = TypeVar("_T")
_R = TypeVar("_R")


class Slots:
    """The -j budget, shared by the scheduler and the builders: make's jobserver, in-process.

    The scheduler holds one slot per running action. A builder that can do parts
    of its action at once (one resolve or docker build per platform) borrows the
    slots it finds idle and never waits for one: so -j1 does one thing at a
    time, and -j2 with a single action left gives that action both cores.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self._free = total
        self._borrowed = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Take one slot for an action if one is free."""
        with self._lock:
            if self._free == 0:
                return False
            self._free -= 1
            return True

    def give(self, count: int = 1) -> None:
        """Give back slots taken or borrowed."""
        with self._lock:
            self._free += count

    @property
    def lent(self) -> bool:
        """Whether builders hold borrowed slots (the scheduler then looks for them back)."""
        with self._lock:
            return self._borrowed > 0

    @contextmanager
    def borrow(self, wanted: int) -> Iterator[int]:
        """Up to `wanted` idle slots (maybe 0) for the length of the block."""
        with self._lock:
            got = max(0, min(wanted, self._free))
            self._free -= got
            self._borrowed += got
        try:
            yield got
        finally:
            with self._lock:
                self._free += got
                self._borrowed -= got


def map_parts(ctx: BuildContext, fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    """`fn` over `items` in order: the action's own slot plus any idle ones at once
    (all of `items` at once when the context has no job budget, as in tests)."""
    if ctx.slots is None:
        return _map(fn, items, len(items))
    with ctx.slots.borrow(len(items) - 1) as extra:
        return _map(fn, items, 1 + extra)


def _map(fn: Callable[[_T], _R], items: Sequence[_T], width: int) -> list[_R]:
    if width <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=width) as pool:
        return list(pool.map(fn, items))


@dataclass(frozen=True)
class BuildContext:
    """Everything a builder may read: the edge's decisions, passed down."""

    root: Path
    dist: Path
    stamp: Stamp
    python: str
    env: Mapping[str, str]
    git: GitIgnored | None = field(default=None, compare=False)
    digests: StatMemo | None = field(default=None, compare=False)
    # The repository's projects and uv.lock (shipyard.workspace), when the plan used them.
    workspace: Workspace | None = field(default=None, compare=False)
    # Per-action stamps by action id (version: git follows each binary's own inputs);
    # the engine hands each builder a context whose `stamp` is its action's.
    stamps: Mapping[str, Stamp] = field(default_factory=dict, compare=False)

    def for_action(self, action: Action) -> BuildContext:
        """This context with `stamp` set to the action's own, when it has one."""
        own = self.stamps.get(action.id)
        return self if own is None or own == self.stamp else replace(self, stamp=own)

    slots: Slots | None = field(default=None, compare=False)

    @property
    def logs(self) -> Path:
        """Where each action's log file goes."""
        return logs_dir(self.dist)


@dataclass(frozen=True)
class Outcome:
    """What running an action gave: its key, the artifacts, its log, whether from the cache."""

    inputs: str  # the action key's digest
    outputs: tuple[Artifact, ...]
    log: Path | None = None
    cached: bool = False


class Builder(Protocol):
    """Builds one kind of action: declares the inputs of its key, and builds.

    The engine computes the key from `inputs` once and passes it to `build`;
    `build` returns the artifacts it wrote, typed and with their metadata, and
    nothing else. It may raise any ShipyardError or OSError: the engine's wrapper
    turns them into a BuildError naming the action and its log.
    """

    kind: str

    def inputs(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Inputs:
        """Every declared input of `action` by name, as JSON data: equal inputs, equal outputs."""
        ...

    def build(
        self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], key: ActionKey
    ) -> tuple[Artifact, ...]:
        """Run `action` given its dependencies' artifacts; return the artifacts it made."""
        ...
