"""Runs a plan's actions on a worker pool and records a result for every one."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, Protocol, TypeVar

from shipyard.engine.plan import Action, Plan
from shipyard.engine.proc import terminate_all
from shipyard.engine.sources import GitIgnored
from shipyard.errors import BuildError, ShipyardError
from shipyard.stamp import Stamp

__all__ = [
    "Artifact",
    "BuildContext",
    "Builder",
    "Event",
    "Outcome",
    "Result",
    "Slots",
    "Status",
    "map_parts",
    "run_plan",
]

Status = Literal["built", "cached", "skipped", "failed"]
_T = TypeVar("_T")
_R = TypeVar("_R")


@dataclass(frozen=True)
class Artifact:
    """One file an action produced."""

    path: Path
    sha256: str
    size: int


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
    slots: Slots | None = field(default=None, compare=False)

    @property
    def logs(self) -> Path:
        """Where each action's log file goes."""
        return self.dist / "logs"


@dataclass(frozen=True)
class Result:
    """What happened to one action: status, reason, time, inputs hash and outputs."""

    action: Action
    status: Status
    duration: float
    inputs: str = ""
    outputs: tuple[Artifact, ...] = ()
    reason: str = ""
    log: Path | None = None
    started: float = 0.0  # seconds since the build began, for the trace
    worker: int = 0
    exit_code: int = 0  # for a failure: 2 when the cause was bad input (say, credentials)


@dataclass(frozen=True)
class Outcome:
    """What a builder returns: its inputs hash (the action key) and the files it wrote."""

    inputs: str
    outputs: tuple[Artifact, ...]
    log: Path | None = None
    cached: bool = False


class Builder(Protocol):
    """Builds one kind of action."""

    kind: str

    def key(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> str:
        """The hash of every declared input of `action`: equal keys, equal outputs."""
        ...

    def build(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Outcome:
        """Run `action` given its dependencies' outputs; raise BuildError on failure."""
        ...


@dataclass(frozen=True)
class Event:
    """Progress news for a display: an action started or finished."""

    action: Action
    result: Result | None = None


@dataclass
class _State:
    results: dict[str, Result] = field(default_factory=dict)
    running: dict[Future[Result], Action] = field(default_factory=dict)


def _run_one(
    builder: Builder, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], t0: float
) -> Result:
    start = time.monotonic()
    worker = threading.get_ident()
    try:
        outcome = builder.build(action, ctx, deps)
    except BuildError as exc:
        cause = exc.__cause__
        code = cause.exit_code if isinstance(cause, ShipyardError) else exc.exit_code
        return Result(
            action,
            "failed",
            time.monotonic() - start,
            reason=str(exc),
            log=exc.log,
            started=start - t0,
            worker=worker,
            exit_code=code,
        )
    return Result(
        action,
        "cached" if outcome.cached else "built",
        time.monotonic() - start,
        outcome.inputs,
        outcome.outputs,
        log=outcome.log,
        started=start - t0,
        worker=worker,
    )


# Guesses of an action's duration in seconds by kind, for a plan with no history.
_GUESS = {"wheel": 2.0, "zipapp": 3.0, "image": 6.0}


def critical_paths(plan: Plan, durations: Mapping[str, float] | None = None) -> dict[str, float]:
    """Each action's critical path: its own duration plus the longest chain after it.

    `durations` are earlier durations by action id (from the last report); a
    missing one is guessed from the action's kind. Ready actions start longest
    path first, so a long chain (a slow wheel before a slow zipapp and image)
    does not wait behind short independent actions: the list-scheduling order
    ninja and Bazel use.
    """
    known = durations or {}
    after: dict[str, list[str]] = {a.id: [] for a in plan.actions}
    for action in plan.actions:
        for dep in action.deps:
            after.setdefault(dep, []).append(action.id)
    kinds = {a.id: a.kind for a in plan.actions}
    paths: dict[str, float] = {}

    def path(action_id: str) -> float:
        if action_id not in paths:
            own = known.get(action_id, _GUESS.get(kinds[action_id], 1.0))
            later = [n for n in after[action_id] if n in kinds]
            paths[action_id] = own + max((path(n) for n in later), default=0.0)
        return paths[action_id]

    for action in plan.actions:
        path(action.id)
    return paths


def run_plan(
    plan: Plan,
    ctx: BuildContext,
    builders: Mapping[str, Builder],
    *,
    jobs: int | None = None,
    keep_going: bool = False,
    on_event: Callable[[Event], None] = lambda _: None,
    durations: Mapping[str, float] | None = None,
) -> list[Result]:
    """Run every action once its dependencies are built; return results in plan order.

    Ready actions start in order of their critical path (see `critical_paths`,
    fed with `durations` from an earlier build when there is one). Fails fast by
    default: after a failure nothing new starts and the rest are recorded as
    skipped with the reason.
    """
    missing = sorted({a.kind for a in plan.actions} - set(builders))
    if missing:
        raise ShipyardError(
            f"no builder for output kind(s) {', '.join(missing)} in this shipyard version"
        )
    state = _State()
    paths = critical_paths(plan, durations)
    pending = sorted(plan.actions, key=lambda a: -paths[a.id])  # stable: plan order on ties
    failed = False
    workers = jobs or os.cpu_count() or 1
    slots = Slots(workers)
    ctx = replace(ctx, slots=slots)
    t0 = time.monotonic()
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        while pending or state.running:
            for action in list(pending):
                broken = [
                    d
                    for d in action.deps
                    if d in state.results and state.results[d].status not in ("built", "cached")
                ]
                if broken or (failed and not keep_going):
                    reason = (
                        f"dependency {broken[0]} did not build"
                        if broken
                        else "an earlier action failed (use --keep-going)"
                    )
                    state.results[action.id] = Result(action, "skipped", 0.0, reason=reason)
                    on_event(Event(action, state.results[action.id]))
                    pending.remove(action)
                elif all(d in state.results for d in action.deps):
                    if not slots.take():
                        break  # submit no more than can run, so failing fast starts nothing new
                    pending.remove(action)
                    on_event(Event(action))
                    deps = tuple(a for d in action.deps for a in state.results[d].outputs)
                    future = pool.submit(_run_one, builders[action.kind], action, ctx, deps, t0)
                    state.running[future] = action
            if not state.running:
                # Only reachable when a dependency is outside the plan: say so, don't spin.
                for action in pending:
                    state.results[action.id] = Result(
                        action, "skipped", 0.0, reason="a dependency is not in the plan"
                    )
                pending.clear()
                continue
            # While a builder holds borrowed slots, look again now and then: one
            # given back mid-action may start the next ready action.
            timeout = 0.05 if slots.lent else None
            done, _ = wait(list(state.running), timeout=timeout, return_when=FIRST_COMPLETED)
            for future in done:
                slots.give()
                action = state.running.pop(future)
                result = future.result()
                state.results[action.id] = result
                failed = failed or result.status == "failed"
                on_event(Event(action, result))
    except BaseException:
        # Interrupted (or a bug): end the running subprocesses first, so the
        # workers unwind now and remove their temporaries, instead of the pool
        # waiting for every running build to finish.
        terminate_all()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return [state.results[a.id] for a in plan.actions]
