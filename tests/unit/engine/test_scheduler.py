"""The worker pool: dependency order, fail fast, keep going, parallelism."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from shipyard.engine.keys import ActionKey, Inputs
from shipyard.engine.plan import Action, Plan
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import (
    Artifact,
    BuildContext,
    Builder,
    Result,
    Slots,
    critical_paths,
    map_parts,
)
from shipyard.engine.scheduler import run_plan as run_runners
from shipyard.errors import BuildError, ShipyardError
from shipyard.manifest import Manifest, Project
from shipyard.stamp import Stamp


def run_plan(
    plan: Plan,
    ctx: BuildContext,
    builders: Mapping[str, Builder],
    jobs: int | None = None,
    durations: Mapping[str, float] | None = None,
    keep_going: bool = False,
) -> list[Result]:
    """The scheduler over `builders` inside the engine's layers, as a build runs them."""
    runners = {kind: wrapped(builder) for kind, builder in builders.items()}
    return run_runners(plan, ctx, runners, jobs=jobs, durations=durations, keep_going=keep_going)


class Recorder:
    """A builder that records order and overlap, and fails the actions it is told to."""

    def __init__(self, kind: str, fail: frozenset[str] = frozenset(), delay: float = 0.0) -> None:
        self.kind = kind
        self.fail = fail
        self.delay = delay
        self.order: list[str] = []
        self.active = 0
        self.peak = 0
        self.lock = threading.Lock()
        self.seen_deps: dict[str, list[str]] = {}

    def inputs(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Inputs:
        return {"id": action.id}

    def build(
        self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], key: ActionKey
    ) -> tuple[Artifact, ...]:
        with self.lock:
            self.order.append(action.id)
            self.seen_deps[action.id] = [a.path.name for a in deps]
            self.active += 1
            self.peak = max(self.peak, self.active)
        time.sleep(self.delay)
        with self.lock:
            self.active -= 1
        if action.id in self.fail:
            raise BuildError(action.id, "boom", command=["false"])
        out = Artifact("wheel", "", "py3-none-any", Path(f"/out/{action.id}.whl"), "0" * 64, 1)
        return (out,)


def _plan(tmp_path: Path, *actions: Action) -> Plan:
    manifest = Manifest(tmp_path / "binaries.yaml", tmp_path, Project("p", "1", "3.11"), {}, {})
    return Plan(manifest, (), actions)


def _ctx(tmp_path: Path) -> BuildContext:
    return BuildContext(tmp_path, tmp_path / "dist", Stamp("1", None, False, 0), "3.11", {})


def _action(name: str, kind: str = "wheel", deps: tuple[str, ...] = ()) -> Action:
    return Action(name, kind, (name,), Path("/src"), (), deps)


def test_dependencies_run_first_and_results_keep_plan_order(tmp_path: Path) -> None:
    wheel = Recorder("wheel")
    zipapp = Recorder("zipapp")
    plan = _plan(tmp_path, _action("w"), _action("z", "zipapp", ("w",)))
    results = run_plan(plan, _ctx(tmp_path), {"wheel": wheel, "zipapp": zipapp}, jobs=2)
    assert [(r.action.id, r.status, r.inputs) for r in results] == [
        ("w", "built", ActionKey.of("wheel", {"id": "w"}).digest),
        ("z", "built", ActionKey.of("zipapp", {"id": "z"}).digest),
    ]
    assert wheel.order == ["w"] and zipapp.order == ["z"]
    assert zipapp.seen_deps == {"z": ["w.whl"]}


def test_jobs_bounds_parallelism(tmp_path: Path) -> None:
    builder = Recorder("wheel", delay=0.05)
    plan = _plan(tmp_path, *(_action(f"a{i}") for i in range(6)))
    run_plan(plan, _ctx(tmp_path), {"wheel": builder}, jobs=2)
    assert builder.peak == 2
    serial = Recorder("wheel", delay=0.01)
    run_plan(plan, _ctx(tmp_path), {"wheel": serial}, jobs=1)
    assert serial.peak == 1


def test_fail_fast_starts_nothing_new(tmp_path: Path) -> None:
    builder = Recorder("wheel", fail=frozenset({"a0"}))
    plan = _plan(tmp_path, *(_action(f"a{i}") for i in range(4)))
    results = run_plan(plan, _ctx(tmp_path), {"wheel": builder}, jobs=1)
    assert [r.status for r in results] == ["failed", "skipped", "skipped", "skipped"]
    assert "boom" in results[0].reason and "false" in results[0].reason
    assert "--keep-going" in results[1].reason


def test_keep_going_skips_only_dependents(tmp_path: Path) -> None:
    wheel = Recorder("wheel", fail=frozenset({"a"}))
    zipapp = Recorder("zipapp")
    plan = _plan(
        tmp_path,
        _action("a"),
        _action("b"),
        _action("za", "zipapp", ("a",)),
        _action("zb", "zipapp", ("b",)),
    )
    results = run_plan(
        plan, _ctx(tmp_path), {"wheel": wheel, "zipapp": zipapp}, jobs=1, keep_going=True
    )
    assert {r.action.id: r.status for r in results} == {
        "a": "failed",
        "b": "built",
        "za": "skipped",
        "zb": "built",
    }
    assert "dependency a did not build" in results[2].reason


def test_unknown_kind_fails_loudly(tmp_path: Path) -> None:
    plan = _plan(tmp_path, _action("x", "image"))
    with pytest.raises(ShipyardError, match="no builder for output kind"):
        run_plan(plan, _ctx(tmp_path), {"wheel": Recorder("wheel")})


def test_critical_paths_add_the_longest_chain_after_each_action(tmp_path: Path) -> None:
    plan = _plan(
        tmp_path,
        _action("w1"),
        _action("w2"),
        _action("z1", "zipapp", ("w1",)),
        _action("i1", "image", ("z1",)),
        _action("z2", "zipapp", ("w2",)),
    )
    paths = critical_paths(plan, {"w1": 1.0, "w2": 5.0, "z1": 2.0, "i1": 3.0, "z2": 1.0})
    assert paths == {"w1": 6.0, "z1": 5.0, "i1": 3.0, "w2": 6.0, "z2": 1.0}
    guessed = critical_paths(plan)  # no history: guesses by kind, images longest
    assert guessed["w1"] > guessed["w2"] and guessed["i1"] > guessed["z2"]


def test_ready_actions_start_longest_critical_path_first(tmp_path: Path) -> None:
    # One worker: the start order is the scheduling order. "slow" heads the longer
    # chain in the last build's durations, so it starts before the earlier-listed
    # "quick" ones, and each dependent starts only after its dependency.
    builder = Recorder("wheel")
    plan = _plan(
        tmp_path,
        _action("quick-a"),
        _action("quick-b"),
        _action("slow"),
        Action("after-slow", "wheel", ("after-slow",), Path("/src"), (), ("slow",)),
    )
    durations = {"quick-a": 1.0, "quick-b": 2.0, "slow": 10.0, "after-slow": 5.0}
    run_plan(plan, _ctx(tmp_path), {"wheel": builder}, jobs=1, durations=durations)
    assert builder.order == ["slow", "after-slow", "quick-b", "quick-a"]


class Parts:
    """A builder whose actions each do `parts` pieces of work through map_parts."""

    kind = "zipapp"

    def __init__(self, parts: int, delay: float = 0.05) -> None:
        self.parts = parts
        self.delay = delay
        self.active = 0
        self.peak = 0
        self.lock = threading.Lock()

    def inputs(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Inputs:
        return {"id": action.id}

    def _piece(self, index: int) -> int:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        time.sleep(self.delay)
        with self.lock:
            self.active -= 1
        return index * 10

    def build(
        self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], key: ActionKey
    ) -> tuple[Artifact, ...]:
        assert map_parts(ctx, self._piece, list(range(self.parts))) == [
            i * 10 for i in range(self.parts)
        ]
        return ()


def test_slots_lend_only_what_is_idle() -> None:
    slots = Slots(2)
    assert slots.take()
    with slots.borrow(3) as extra:
        assert extra == 1 and slots.lent
        assert not slots.take()  # the borrowed slot is not free for a new action
    assert not slots.lent
    assert slots.take() and not slots.take()
    slots.give(2)
    with slots.borrow(5) as extra:
        assert extra == 2


@pytest.mark.parametrize(("jobs", "actions", "peak"), [(1, 1, 1), (1, 3, 1), (2, 1, 2), (2, 3, 2)])
def test_the_job_budget_bounds_work_inside_actions_too(
    tmp_path: Path, jobs: int, actions: int, peak: int
) -> None:
    """-j1 runs one piece of work at a time, even inside an action; with -j2 a
    lone action gets both slots; never more pieces at once than -j."""
    builder = Parts(parts=2)
    plan = _plan(tmp_path, *(_action(f"z{i}", "zipapp") for i in range(actions)))
    results = run_plan(plan, _ctx(tmp_path), {"zipapp": builder}, jobs=jobs)
    assert {r.status for r in results} == {"built"}
    assert builder.peak == peak


def test_a_slot_given_back_mid_action_starts_the_next_ready_action(tmp_path: Path) -> None:
    """The scheduler notices a borrowed slot coming back before its borrower ends."""
    started: dict[str, float] = {}
    sleeps = {"Y": 0.05, "B1": 1.0, "B2": 0.05}

    class Borrower:
        kind = "wheel"

        def inputs(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Inputs:
            return {"id": action.id}

        def build(
            self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], key: ActionKey
        ) -> tuple[Artifact, ...]:
            started[action.id] = time.monotonic()
            if action.id == "A":
                map_parts(ctx, lambda _: time.sleep(0.3), [0, 1])  # two slots for 0.3 s
                time.sleep(0.6)  # then its own slot only
            time.sleep(sleeps.get(action.id, 0.0))
            return ()

    plan = _plan(
        tmp_path,
        _action("A"),
        _action("Y"),
        _action("B1", deps=("Y",)),
        _action("B2", deps=("Y",)),
    )
    t0 = time.monotonic()
    durations = {"A": 9.0, "Y": 0.1, "B1": 5.0, "B2": 0.1}
    results = run_plan(plan, _ctx(tmp_path), {"wheel": Borrower()}, jobs=3, durations=durations)
    assert {r.status for r in results} == {"built"}
    # A holds a borrowed slot while Y ends and B1 takes Y's; B2 starts when A
    # gives the borrowed slot back (~0.3 s), not when A or B1 end (~0.9 s, ~1.05 s).
    assert started["B1"] - t0 < 0.2
    assert 0.25 < started["B2"] - t0 < 0.7
