"""dist/report.json: every action with its inputs hash, outputs, status and time.

Each output is a typed artifact (`shipyard.artifacts`): path, sha256, size,
kind, binary, platform and metadata; `read_artifacts` reads them back, so push
and release find what a build made without parsing file names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shipyard._fs import atomic_write
from shipyard.artifacts import Artifact
from shipyard.dist import report_file, trace_file
from shipyard.engine.plan import Plan
from shipyard.engine.scheduler import BuildContext, Result

__all__ = [
    "previous_actions",
    "previous_durations",
    "read_artifacts",
    "report_json",
    "reported_outputs",
    "trace_json",
    "write_report",
]


def _rel(path: Path, root: Path) -> str:
    # By strings: a no-op build reports every output, and pathlib's parsing shows.
    text, top = str(path), str(root).rstrip("/") + "/"
    return text[len(top) :] if text.startswith(top) else text


def _actions(report: Path) -> list[dict[str, Any]] | None:
    """The action entries of the report at `report` (those that are objects), or None
    when there is no readable report."""
    try:
        actions = json.loads(report.read_bytes())["actions"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return [a for a in actions if isinstance(a, dict)] if isinstance(actions, list) else []


def read_artifacts(report: Path, root: Path) -> tuple[Artifact, ...] | None:
    """The artifacts of the built and cached actions in the report at `report`.

    None when there is no readable report; outputs of another shape (a report
    written by an older shipyard) are left out.
    """
    actions = _actions(report)
    if actions is None:
        return None
    found: list[Artifact] = []
    for action in actions:
        if action.get("status") not in ("built", "cached"):
            continue
        for output in action.get("outputs") or ():
            try:
                found.append(Artifact.from_json(output, root))
            except ValueError:
                continue
    return tuple(found)


def reported_outputs(report: Path) -> dict[str, list[object]]:
    """Action key -> the outputs (as listed) of the built and cached actions in `report`."""
    found: dict[str, list[object]] = {}
    for action in _actions(report) or ():
        key, outputs = action.get("inputs"), action.get("outputs")
        done = action.get("status") in ("built", "cached")
        if done and isinstance(key, str) and isinstance(outputs, list):
            found[key] = outputs
    return found


def previous_actions(report: Path) -> list[dict[str, Any]]:
    """The action entries of the last report in this dist/ (none when unreadable): read
    once per build, for the scheduler's durations and the entries a run keeps."""
    return _actions(report) or []


def previous_durations(actions: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Action id -> seconds of the actions (of `previous_actions`) the last build ran
    (not cache hits)."""
    try:
        return {str(a["id"]): float(a["duration"]) for a in actions if a.get("status") == "built"}
    except (KeyError, TypeError, ValueError):
        return {}


def report_json(
    plan: Plan,
    results: Sequence[Result],
    ctx: BuildContext,
    build_seconds: Mapping[str, float] | None = None,
    remote: Mapping[str, object] | None = None,
) -> dict[str, Any]:
    """The report as a JSON-ready mapping.

    `build_seconds` of an action is how long its last real build took: this
    build's duration when it was built, else carried over from `build_seconds`
    (the last report's), so a no-op build keeps what scheduling needs. `remote` is
    what the build did with its shared cache (`cache.remote`; null without one).
    """
    root = ctx.root
    earlier = build_seconds or {}
    return {
        "project": plan.manifest.project.name,
        "version": ctx.stamp.version,
        "revision": ctx.stamp.revision,
        "dirty": ctx.stamp.dirty,
        "source_date_epoch": ctx.stamp.epoch,
        "actions": [
            {
                **r.action.to_json(root),
                "version": r.version or ctx.for_action(r.action).stamp.version,
                "status": r.status,
                "reason": r.reason,
                "duration": round(r.duration, 3),
                "build_seconds": (
                    round(r.duration, 3) if r.status == "built" else earlier.get(r.action.id)
                ),
                "inputs": r.inputs,
                "outputs": [a.to_json(root) for a in r.outputs],
                "log": _rel(r.log, root) if r.log else None,
            }
            for r in results
        ],
        "skips": [{"binary": s.binary, "reason": s.reason} for s in plan.skips],
        "cache": {"remote": dict(remote) if remote is not None else None},
    }


def write_report(
    plan: Plan,
    results: Sequence[Result],
    ctx: BuildContext,
    build_seconds: Mapping[str, float] | None = None,
    previous: Sequence[dict[str, Any]] = (),
    remote: Mapping[str, object] | None = None,
) -> Path:
    """Write dist/report.json atomically and return its path.

    A build and a `shipyard test` share the file: each replaces its own entries and
    keeps the other's from `previous` (the last report's entries: the last build's
    outputs, which push reads, and the last test run's stages)."""
    path = report_file(ctx.dist)
    data = report_json(plan, results, ctx, build_seconds, remote)
    testing = {r.action.kind == "test" for r in results}
    if len(testing) == 1:
        kept = [a for a in previous if (a.get("kind") == "test") not in testing]
        data["actions"] = kept + data["actions"] if testing == {True} else data["actions"] + kept
    text = json.dumps(data, indent=2, sort_keys=False) + "\n"
    # Not fsynced: rewritten by every build, and one a power cut empties reads as "no
    # report" (push and release then ask for a build, which restores from the cache).
    atomic_write(path, text.encode(), durable=False)
    trace = json.dumps(trace_json(results), separators=(",", ":")) + "\n"
    atomic_write(trace_file(ctx.dist), trace.encode(), durable=False)
    return path


def annotate(report: Path, extra: Mapping[str, Mapping[str, object]]) -> None:
    """Add `extra` fields to the report's actions, by action id (a test stage's counts
    and why it was selected); the report is left as it is when it cannot be read."""
    try:
        data = json.loads(report.read_bytes())
        actions = data["actions"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if not isinstance(actions, list):
        return
    for entry in actions:
        if isinstance(entry, dict) and entry.get("id") in extra:
            entry.update(extra[str(entry["id"])])
    text = json.dumps(data, indent=2, sort_keys=False) + "\n"
    atomic_write(report, text.encode(), durable=False)


def trace_json(results: Sequence[Result]) -> dict[str, Any]:
    """Chrome trace-event format (opens in Perfetto): each action on its worker over time."""
    workers: dict[int, int] = {}
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "shipyard build"}}
    ]
    for r in sorted(results, key=lambda r: r.started):
        if r.status == "skipped":
            continue
        tid = workers.setdefault(r.worker, len(workers) + 1)
        events.append(
            {
                "name": r.action.id,
                "cat": r.action.kind,
                "ph": "X",
                "pid": 1,
                "tid": tid,
                "ts": round(r.started * 1e6),
                "dur": max(1, round(r.duration * 1e6)),
                "args": {"status": r.status, "inputs": r.inputs},
            }
        )
    for tid in workers.values():
        events.append(
            {
                "name": "thread_name",
                "ph": "M",
                "pid": 1,
                "tid": tid,
                "args": {"name": f"worker {tid}"},
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ms"}
