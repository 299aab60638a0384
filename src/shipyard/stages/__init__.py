"""Test stages: lint, typecheck, unit and integration of the repository's projects as
cached actions in the engine's graph (`shipyard test`).

Each project's stages come from the project (ruff, mypy, pytest when it has them)
under binaries.yaml's `tests:` section (`_settings`); a run selects them like a build
(`_select`: --stage, --project, --target, --since), runs each in an environment made
from the lock (`_env`) with its services started first (`_runner`), keyed by its
inputs so a passing stage is a cache hit next time, and reports every stage in
report.json, `dist/logs/` and one JUnit file (`_junit`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from shipyard.dist import dist_dir, merged_results, report_file, stage_result
from shipyard.engine.report import annotate
from shipyard.engine.run import BuildOptions, BuildRun
from shipyard.engine.scheduler import Event, Result
from shipyard.manifest import Manifest
from shipyard.stages._junit import Counts, StageXml, counts, merge
from shipyard.stages._runner import StageRunner, service_variable
from shipyard.stages._select import TestPlan, TestSelection, affected_projects, plan_tests
from shipyard.stages._settings import STAGES, Found, stages_of

__all__ = [
    "STAGES",
    "Counts",
    "Found",
    "StageRunner",
    "TestPlan",
    "TestRun",
    "TestSelection",
    "affected_projects",
    "load",
    "plan_tests",
    "run_tests",
    "service_variable",
    "stages_of",
    "status_word",
]


def status_word(status: str) -> str:
    """What a stage's result is called: a built stage passed."""
    return {"built": "passed"}.get(status, status)


@dataclass(frozen=True)
class TestRun:
    """A finished `shipyard test`: the build run, each stage's counts, the totals."""

    __test__ = False

    tests: TestPlan
    run: BuildRun
    counts: Mapping[str, Counts]
    total: Counts
    junit: Path

    @property
    def exit_code(self) -> int:
        """0 when every stage passed or was cached, 2 for bad input, else 1."""
        return self.run.exit_code


def load(manifest: Manifest, selection: TestSelection, *, cache_dir: Path | None) -> TestPlan:
    """The projects, checked for what is tested, and the plan of the selection."""
    from shipyard.engine.planning import load_projects

    workspace = load_projects(manifest, cache_dir=cache_dir)
    tests = plan_tests(manifest, workspace, selection)
    keys = sorted({a.project for a in tests.plan.actions})
    for key in keys:
        workspace.check(key, workspace.projects[key].extras)
    if workspace.lock is not None and keys:
        from shipyard.dist import lock_check_file
        from shipyard.workspace import check_lock

        members = [k for k in keys if k in workspace.lock.members]
        if members:
            status = check_lock(
                workspace,
                members,
                env=os.environ,
                memo=lock_check_file(dist_dir(manifest.root)),
            )
            workspace.lock_status.append(status)
    return tests


def run_tests(
    tests: TestPlan,
    selection: TestSelection,
    options: BuildOptions,
    *,
    on_event: Callable[[Event], None] = lambda _: None,
) -> TestRun:
    """Run the stages of `tests`: cached ones restored, the rest run; then the merged
    JUnit file and report.json's test entries (stage, counts, and with --since why)."""
    from shipyard.engine.run import execute
    from shipyard.files.sources import GitIgnored
    from shipyard.stamp import read_stamp

    manifest = tests.plan.manifest
    stamp = read_stamp(
        manifest.root,
        manifest.project.version,
        os.environ,
        tag_prefix=manifest.project.tag_prefix_for(),
        check=False,
    )
    runner = StageRunner(selection.args)
    run = execute(
        tests.plan,
        stamp,
        {"test": runner},
        options,
        on_event=on_event,
        git=GitIgnored(manifest.root).prefetch(),
    )
    dist = dist_dir(manifest.root)
    found: dict[str, Counts] = {}
    rows = []
    for result in run.results:
        action = result.action
        path = stage_result(dist, action.project, action.stage)
        has_file = result.status in ("built", "cached", "failed") and path.is_file()
        got = counts(path) if has_file else None
        if got is not None:
            found[action.id] = got
        rows.append(
            StageXml(
                action.project,
                action.stage,
                status_word(result.status),
                result.duration,
                path if has_file else None,
                result.reason,
            )
        )
    junit = merged_results(dist)
    total = merge(rows, junit)
    _annotate(report_file(dist), run.results, found, tests)
    return TestRun(tests, run, found, total, junit)


def _annotate(
    report: Path, results: tuple[Result, ...], found: Mapping[str, Counts], tests: TestPlan
) -> None:
    """Add each stage's counts and --since reasons to report.json's test entries."""
    extra: dict[str, dict[str, object]] = {}
    for result in results:
        action = result.action
        entry: dict[str, object] = {"status_text": status_word(result.status)}
        if action.id in found:
            entry["tests"] = found[action.id].to_json()
        reasons = tests.reasons.get(action.project)
        if reasons:
            entry["affected"] = [r.to_json() for r in reasons]
        extra[action.id] = entry
    annotate(report, extra)
