"""The worker pool: dependency order, fail fast, keep going, parallelism."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from shipyard.build.engine import Artifact, BuildContext, Outcome, critical_paths, run_plan
from shipyard.build.plan import Action, Plan
from shipyard.errors import BuildError, ShipyardError
from shipyard.manifest import Manifest, Project
from shipyard.stamp import Stamp


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

    def key(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> str:
        return f"hash-{action.id}"

    def build(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Outcome:
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
        out = Artifact(Path(f"/out/{action.id}.whl"), "0" * 64, 1)
        return Outcome(inputs=f"hash-{action.id}", outputs=(out,))


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
        ("w", "built", "hash-w"),
        ("z", "built", "hash-z"),
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
