"""Runs a plan's actions on a worker pool and records a result for every one."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from packaging.utils import canonicalize_name

from shipyard.artifacts import Artifact
from shipyard.engine.context import BuildContext, Builder, Outcome, Slots, map_parts
from shipyard.engine.plan import Action, Plan
from shipyard.engine.wrapper import Wrapped
from shipyard.errors import BuildError, ShipyardError
from shipyard.process import terminate_all

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
    version: str = ""  # the version it carries, when not its stamp's (a declared version)


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
    runner: Wrapped, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], t0: float
) -> Result:
    start = time.monotonic()
    worker = threading.get_ident()
    own = declared(ctx.for_action(action), action, deps)
    try:
        outcome = runner.run(action, own, deps)
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
    wheels = [a.metadata.wheel for a in outcome.outputs if a.kind == "wheel" and a.metadata.wheel]
    return Result(
        action,
        "cached" if outcome.cached else "built",
        time.monotonic() - start,
        outcome.inputs,
        outcome.outputs,
        log=outcome.log,
        started=start - t0,
        worker=worker,
        version=wheels[0].version if len(wheels) == 1 else own.stamp.version,
    )


def declared(ctx: BuildContext, action: Action, deps: tuple[Artifact, ...]) -> BuildContext:
    """The context a zipapp or image builds in: its version is its own wheel's, which is
    shipyard's stamp unless the project declares its version (static, or a file the
    backend reads): a binary ships the version its project says."""
    if action.kind not in ("zipapp", "image") or not action.project:
        return ctx
    for artifact in deps:
        wheel = artifact.metadata.wheel if artifact.kind == "wheel" else None
        if wheel is None or canonicalize_name(wheel.name) != action.project:
            continue
        if wheel.version != ctx.stamp.version:
            return replace(ctx, stamp=replace(ctx.stamp, version=wheel.version))
    return ctx


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
    builders: Mapping[str, Builder | Wrapped],
    *,
    jobs: int | None = None,
    keep_going: bool = False,
    on_event: Callable[[Event], None] = lambda _: None,
    durations: Mapping[str, float] | None = None,
) -> list[Result]:
    """Run every action once its dependencies are built; return results in plan order.

    A plain builder is wrapped (`Wrapped`: key once, errors translated, no
    cache); a wrapped one (with a cache) runs as it is.

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
    runners = {k: b if isinstance(b, Wrapped) else Wrapped(b) for k, b in builders.items()}
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
                    future = pool.submit(_run_one, runners[action.kind], action, ctx, deps, t0)
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
