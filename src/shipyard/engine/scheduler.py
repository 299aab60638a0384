"""Runs a plan's actions on a worker pool and records a result for every one."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from packaging.utils import canonicalize_name

from shipyard.artifacts import Artifact
from shipyard.engine.context import BuildContext, Builder, Outcome, Slots, map_parts
from shipyard.engine.plan import Action, Plan
from shipyard.engine.wrapper import Runner
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


def _run_one(
    runner: Runner, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], t0: float
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


class _Run:
    """One run of a plan: what is pending, running and done, on a pool of workers."""

    def __init__(
        self,
        plan: Plan,
        ctx: BuildContext,
        runners: Mapping[str, Runner],
        *,
        jobs: int | None,
        keep_going: bool,
        on_event: Callable[[Event], None],
        durations: Mapping[str, float] | None,
    ) -> None:
        paths = critical_paths(plan, durations)
        self.pending = sorted(plan.actions, key=lambda a: -paths[a.id])  # stable on ties
        self.results: dict[str, Result] = {}
        self.running: dict[Future[Result], Action] = {}
        self.failed = False
        self.runners = runners
        self.keep_going = keep_going
        self.on_event = on_event
        workers = jobs or os.cpu_count() or 1
        self.slots = Slots(workers)
        self.ctx = replace(ctx, slots=self.slots)
        self.t0 = time.monotonic()
        self.pool = ThreadPoolExecutor(max_workers=workers)

    def _skip(self, action: Action, reason: str) -> None:
        self.results[action.id] = Result(action, "skipped", 0.0, reason=reason)
        self.on_event(Event(action, self.results[action.id]))
        self.pending.remove(action)

    def start_ready(self) -> None:
        """Start the ready actions while slots are free; skip those that cannot run."""
        for action in list(self.pending):
            broken = [
                d
                for d in action.deps
                if d in self.results and self.results[d].status not in ("built", "cached")
            ]
            if broken:
                self._skip(action, f"dependency {broken[0]} did not build")
            elif self.failed and not self.keep_going:
                self._skip(action, "an earlier action failed (use --keep-going)")
            elif all(d in self.results for d in action.deps):
                if not self.slots.take():
                    break  # submit no more than can run, so failing fast starts nothing new
                self.pending.remove(action)
                self.on_event(Event(action))
                deps = tuple(a for d in action.deps for a in self.results[d].outputs)
                runner = self.runners[action.kind]
                future = self.pool.submit(_run_one, runner, action, self.ctx, deps, self.t0)
                self.running[future] = action

    def skip_stranded(self) -> None:
        """Nothing runs yet actions wait: only when a dependency is outside the plan.
        Say so for each, rather than spin."""
        for action in self.pending:
            self.results[action.id] = Result(
                action, "skipped", 0.0, reason="a dependency is not in the plan"
            )
        self.pending.clear()

    def collect(self) -> None:
        """Wait for an action to finish and record its result."""
        # While a builder holds borrowed slots, look again now and then: one
        # given back mid-action may start the next ready action.
        timeout = 0.05 if self.slots.lent else None
        done, _ = wait(list(self.running), timeout=timeout, return_when=FIRST_COMPLETED)
        for future in done:
            self.slots.give()
            action = self.running.pop(future)
            result = future.result()
            self.results[action.id] = result
            self.failed = self.failed or result.status == "failed"
            self.on_event(Event(action, result))


def run_plan(
    plan: Plan,
    ctx: BuildContext,
    runners: Mapping[str, Runner],
    *,
    jobs: int | None = None,
    keep_going: bool = False,
    on_event: Callable[[Event], None] = lambda _: None,
    durations: Mapping[str, float] | None = None,
) -> list[Result]:
    """Run every action once its dependencies are built; return results in plan order.

    `runners` are builders inside the engine's layers (`shipyard.engine.run.wrapped`).
    Ready actions start in order of their critical path (see `critical_paths`,
    fed with `durations` from an earlier build when there is one). Fails fast by
    default: after a failure nothing new starts and the rest are recorded as
    skipped with the reason.
    """
    missing = sorted({a.kind for a in plan.actions} - set(runners))
    if missing:
        raise ShipyardError(
            f"no builder for output kind(s) {', '.join(missing)} in this shipyard version"
        )
    run = _Run(
        plan, ctx, runners, jobs=jobs, keep_going=keep_going, on_event=on_event, durations=durations
    )
    try:
        while run.pending or run.running:
            run.start_ready()
            if run.running:
                run.collect()
            else:
                run.skip_stranded()
    except BaseException:
        # Interrupted (or a bug): end the running subprocesses first, so the
        # workers unwind now and remove their temporaries, instead of the pool
        # waiting for every running build to finish.
        terminate_all()
        run.pool.shutdown(wait=True, cancel_futures=True)
        raise
    run.pool.shutdown(wait=True)
    return [run.results[a.id] for a in plan.actions]
