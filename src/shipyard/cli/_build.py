"""`shipyard build`, `plan` and `affected`: what a selection builds, building it, and why."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from shipyard.cli._args import (
    cache_dir,
    manifest_of,
    nothing_since,
    plan_of,
    print_plan,
    selection_of,
)
from shipyard.errors import UsageError

if TYPE_CHECKING:
    from shipyard.engine.build import BuildRequest
    from shipyard.engine.plan import Plan
    from shipyard.engine.scheduler import Result

__all__ = ["affected_command", "build_command", "plan_command", "request_of"]


def request_of(args: argparse.Namespace) -> BuildRequest:
    """The engine's request for `shipyard build`'s flags."""
    from shipyard.engine.build import BuildRequest

    return BuildRequest(
        version=args.release_version,
        jobs=args.jobs,
        keep_going=args.keep_going,
        cache_dir=None if args.no_cache else cache_dir(args),
        force=args.force,
        remote=args.remote,
        cache_mode=args.cache_mode,
        shard=args.shard,
        env=os.environ,
    )


def build_command(args: argparse.Namespace) -> int:
    """`shipyard build`: the selection's outputs into dist/, then a summary."""
    plan = plan_of(args, manifest_of(args, cached=True))
    if nothing_since(args, plan):
        return 0
    if args.dry_run:
        print_plan(plan, args.json)
        return 0
    if not plan.actions:  # `plan_of` said why; leave dist/ and its report as they are
        return 0
    from shipyard.builders import BUILDERS
    from shipyard.cli._console import Display
    from shipyard.engine.build import build
    from shipyard.engine.report import report_json

    display = Display()

    def planned(plan: Plan) -> None:
        display.planned(len(plan.actions))
        for skip in plan.skips:
            print(f"skip    {skip.binary}: {skip.reason}", file=sys.stderr)

    try:
        run = build(plan, request_of(args), BUILDERS, on_plan=planned, on_event=display)
    finally:
        display.close()
    if args.json:
        remote = run.remote.to_json() if run.remote is not None else None
        report = report_json(run.plan, run.results, run.context, remote=remote)
        print(json.dumps(report, indent=2))
    else:
        display.summary(run.results)
    for result in run.failed:
        print(f"shipyard: {result.reason}", file=sys.stderr)
    if run.remote is not None:
        print(f"shipyard: {run.remote.line()}", file=sys.stderr)
    _warn_sizes(run.plan, run.results)
    return run.exit_code


def _warn_sizes(plan: Plan, results: Sequence[Result]) -> None:
    """A warning per output outside its size budget; a build still succeeds (release
    validate is where a budget fails)."""
    if not any(b.size for b in plan.binaries):
        return
    from shipyard.engine.sizes import check_sizes

    for finding in check_sizes(plan.binaries, results):
        print(f"warning: {finding.message(plan.manifest.root)}", file=sys.stderr)


def plan_command(args: argparse.Namespace) -> int:
    """`shipyard plan`: the build's actions, then every project's test stages."""
    plan = plan_of(args, manifest_of(args, cached=True))
    rows: list[dict[str, object]] = []
    tests = None
    if plan.workspace is not None and not getattr(args, "since", None):
        from shipyard.cli._test import stage_rows
        from shipyard.stages import TestSelection, plan_tests

        tests = plan_tests(plan.manifest, plan.workspace, TestSelection())
        rows = stage_rows(tests)
    if args.json:
        print(json.dumps({**plan.to_json(), "stages": rows}, indent=2))
        return 0
    print_plan(plan, False)
    if tests is not None and tests.plan.actions:
        from shipyard.cli._test import print_stages

        print("test stages (shipyard test):")
        print_stages(tests, prefix="  ")
    return 0


def affected_command(args: argparse.Namespace) -> int:
    """`shipyard affected`: the selected binaries whose inputs changed since --since, and why."""
    from shipyard.engine.affected import affected
    from shipyard.engine.plan import make_plan
    from shipyard.engine.planning import read_workspace

    if not args.since:
        raise UsageError("affected needs --since=REF (a git commit, branch or tag to compare with)")
    manifest = manifest_of(args, cached=True)
    workspace = read_workspace(manifest, cache_dir=cache_dir(args))
    selected = make_plan(manifest, selection_of(args), workspace=workspace).binary_names
    found = affected(manifest, workspace, args.since, selected, env=os.environ)
    if args.json:
        report = {
            "since": args.since,
            "binaries": [a.binary for a in found],
            "affected": [a.to_json() for a in found],
        }
        print(json.dumps(report, indent=2))
        return 0
    for item in found:
        shown = [str(r) for r in item.reasons[:3]]
        more = len(item.reasons) - len(shown)
        print(f"{item.binary}: {'; '.join(shown)}" + (f"; and {more} more" if more else ""))
    if not found:
        print(f"nothing affected since {args.since}", file=sys.stderr)
    return 0
