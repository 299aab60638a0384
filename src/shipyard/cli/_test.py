"""`shipyard test`: the test stages of the repository's projects, selected like a build."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shipyard.cli._parser import CACHE_MODE_HELP

if TYPE_CHECKING:
    from shipyard.manifest import Manifest
    from shipyard.stages import TestPlan, TestRun, TestSelection

__all__ = ["add_parser", "print_stages", "run", "stage_rows"]


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add `test` to the subcommands."""
    test = sub.add_parser(
        "test",
        parents=[common],
        help="run the projects' test stages (lint, typecheck, unit, integration), cached",
        description="Run each project's test stages in an environment made from the lock; "
        "a passing stage whose inputs are unchanged is a cache hit. Arguments after -- go "
        "to every selected stage's command (e.g. -- -k name).",
    )
    for flag, meta, text in (
        (
            "--stage",
            "NAME",
            "a stage (lint, typecheck, unit, integration, or one binaries.yaml names)",
        ),
        ("--project", "NAME", "a project by its pyproject.toml name"),
        ("--target", "GROUP", "the projects of a group's binaries and their libraries"),
    ):
        test.add_argument(flag, action="append", metavar=meta, help=text + "; repeatable, a,b ok")
    test.add_argument("--since", metavar="REF", help="only projects whose inputs changed since REF")
    test.add_argument("--shard", metavar="I/N", help="run only slice I of N of the stages")
    test.add_argument("--keep-going", action="store_true", help="after a failure, run the rest")
    test.add_argument("-j", "--jobs", type=int, default=None, help="stages at once (CPUs)")
    test.add_argument("--json", action="store_true", help="print JSON for machines")
    test.add_argument("--dry-run", action="store_true", help="list the stages, run nothing")
    test.add_argument("--cache-dir", help="action cache (default: $SHIPYARD_CACHE_DIR, XDG)")
    test.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    test.add_argument("--force", action="store_true", help="run cached stages again")
    test.add_argument(
        "--cache",
        dest="remote",
        metavar="URL",
        help="also share a remote cache: oci://, http[s]:// or grpc[s]://",
    )
    test.add_argument("--cache-mode", metavar="MODE", help=CACHE_MODE_HELP)
    test.add_argument("args", nargs="*", metavar="-- ARGS", help="passed to each stage's command")


def _split(values: list[str] | None) -> tuple[str, ...]:
    from shipyard.engine.plan import split_flag

    return split_flag(values)


def stage_rows(tests: TestPlan) -> list[dict[str, object]]:
    """Each selected stage with its command and where it came from (and why, with --since)."""
    origins = {(f.project, f.stage): f.origin for stages in tests.found.values() for f in stages}
    rows: list[dict[str, object]] = []
    for action in tests.plan.actions:
        assert action.test is not None
        rows.append(
            {
                "id": action.id,
                "project": action.project,
                "stage": action.stage,
                "command": action.test.command,
                "groups": list(action.test.groups) if action.test.groups is not None else None,
                "services": [s.name for s in action.test.services or ()],
                "from": origins.get((action.project, action.stage), ""),
                "affected": [str(r) for r in tests.reasons.get(action.project, ())],
            }
        )
    return rows


def print_stages(tests: TestPlan, as_json: bool = False, prefix: str = "") -> None:
    """The stages as `stage_rows` gives them, as text or JSON."""
    rows: list[dict[str, Any]] = stage_rows(tests)
    if as_json:
        print(json.dumps({"stages": rows}, indent=2))
        return
    for row in rows:
        extra = f" with {', '.join(row['services'])}" if row["services"] else ""
        why = f"; {row['affected'][0]}" if row["affected"] else ""
        print(f"{prefix}{row['id']}: {row['command']}{extra} ({row['from']}{why})")


def _tests(args: argparse.Namespace, manifest: Manifest) -> tuple[TestSelection, TestPlan]:
    """The selection the flags make, and its test plan (cut to --shard); bad -j,
    --shard or --cache fail here, before anything runs."""
    from dataclasses import replace

    from shipyard.engine.build import check_jobs, check_remote, parse_shard
    from shipyard.engine.cache.local import default_cache_dir
    from shipyard.engine.cache.mode import cache_mode
    from shipyard.engine.plan import shard
    from shipyard.stages import TestSelection, load

    check_jobs(args.jobs)
    selection = TestSelection(
        stages=_split(args.stage),
        projects=_split(args.project),
        targets=_split(args.target),
        since=args.since,
        args=tuple(args.args),
    )
    tests = load(manifest, selection, cache_dir=default_cache_dir(args.cache_dir, os.environ))
    if args.shard:
        tests = replace(tests, plan=shard(tests.plan, *parse_shard(args.shard)))
    check_remote(args.remote)
    cache_mode(args.cache_mode, os.environ)
    return selection, tests


def run(args: argparse.Namespace, manifest: Manifest) -> int:
    """Run `shipyard test`; the exit code (1 when a stage failed)."""
    from shipyard.engine.cache.local import default_cache_dir
    from shipyard.engine.cache.mode import cache_mode
    from shipyard.engine.run import BuildOptions
    from shipyard.stages import run_tests

    selection, tests = _tests(args, manifest)
    if args.dry_run:
        print_stages(tests, args.json)
        return 0
    if not tests.plan.actions:
        why = f" since {args.since}" if args.since else " for this selection"
        print(f"no test stages{why}", file=sys.stderr)
        return 0
    for key, reasons in tests.reasons.items():
        shown = "; ".join(str(r) for r in reasons[:2])
        more = f"; and {len(reasons) - 2} more" if len(reasons) > 2 else ""
        print(f"affected {key}: {shown}{more}", file=sys.stderr)
    from shipyard.cli._console import Display

    display = Display(
        sys.stderr, total=len(tests.plan.actions), noun="stages", words={"built": "passed"}
    )
    options = BuildOptions(
        jobs=args.jobs,
        keep_going=args.keep_going,
        cache_dir=None if args.no_cache else default_cache_dir(args.cache_dir, os.environ),
        force=args.force,
        remote=args.remote,
        cache_mode=cache_mode(args.cache_mode, os.environ),
    )
    try:
        done = run_tests(tests, selection, options, on_event=display)
    finally:
        display.close()
    if args.json:
        print(json.dumps(_json(done), indent=2))
    else:
        _summary(done, manifest.root)
    for result in done.run.failed:
        print(f"shipyard: {result.reason}", file=sys.stderr)
    if done.run.remote is not None:
        print(f"shipyard: {done.run.remote.line()}", file=sys.stderr)
    return done.exit_code


def _json(done: TestRun) -> dict[str, object]:
    from shipyard.stages import status_word

    return {
        "stages": [
            {
                "id": r.action.id,
                "project": r.action.project,
                "stage": r.action.stage,
                "status": status_word(r.status),
                "duration": round(r.duration, 3),
                "reason": r.reason,
                "tests": done.counts[r.action.id].to_json() if r.action.id in done.counts else None,
                "log": str(r.log) if r.log else None,
            }
            for r in done.run.results
        ],
        "total": done.total.to_json(),
        "junit": str(done.junit),
    }


def _summary(done: TestRun, root: Path) -> None:
    from shipyard.stages import Counts, status_word

    out = sys.stderr
    statuses: dict[str, int] = {}
    for r in done.run.results:
        word = status_word(r.status)
        statuses[word] = statuses.get(word, 0) + 1
        found = done.counts.get(r.action.id)
        tally = ""
        if found is not None and found.tests:
            parts = [f"{found.passed} passed"]
            parts += [f"{found.failures} failed"] if found.failures else []
            parts += [f"{found.errors} errors"] if found.errors else []
            parts += [f"{found.skipped} skipped"] if found.skipped else []
            tally = ", ".join(parts)
        if r.status == "failed" and r.log is not None:
            tally = (tally + "; " if tally else "") + f"log {r.log.relative_to(root)}"
        print(f"{status_word(r.status):<7} {r.action.id:<40} {r.duration:6.1f}s {tally}", file=out)
    told = ", ".join(f"{n} {w}" for w, n in sorted(statuses.items()))
    # The tests the stages ran (or restored): a stage that did not run counts none.
    total = sum(done.counts.values(), Counts())
    plural = "stage" if len(done.run.results) == 1 else "stages"
    print(
        f"{len(done.run.results)} {plural}: {told}; tests: {total.passed} passed, "
        f"{total.failures + total.errors} failed, {total.skipped} skipped; "
        f"JUnit: {done.junit.relative_to(root)}",
        file=out,
    )
