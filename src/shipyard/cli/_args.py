"""From a command's flags to the library's inputs: the manifest (-f), the selection and
the plan (--since), and the notes a command prints when the plan leaves nothing."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard.engine.cache.local import default_cache_dir
from shipyard.engine.plan import Plan, Selection, split_flag
from shipyard.errors import UsageError
from shipyard.manifest import find_manifest, load_manifest

if TYPE_CHECKING:
    from shipyard.manifest import Manifest

__all__ = ["cache_dir", "manifest_of", "nothing_since", "plan_of", "print_plan", "selection_of"]


def cache_dir(args: argparse.Namespace) -> Path:
    """--cache-dir, else $SHIPYARD_CACHE_DIR, else the user cache directory."""
    return default_cache_dir(getattr(args, "cache_dir", None), os.environ)


def manifest_of(args: argparse.Namespace, *, cached: bool = False) -> Manifest:
    """The manifest -f names (default: binaries.yaml here or above); `cached`: validated
    once per change, in the cache (unless --no-cache)."""
    path = args.file if args.file else find_manifest(Path.cwd())
    if not path.exists():
        raise UsageError(f"-f {path}: no such file; pass the path of binaries.yaml")
    use_cache = cached and not getattr(args, "no_cache", False)
    return load_manifest(path, cache_dir=cache_dir(args) if use_cache else None)


def selection_of(args: argparse.Namespace) -> Selection:
    """--target, --binary, --output and --platform."""
    return Selection(
        targets=split_flag(args.target),
        binaries=split_flag(args.binary),
        outputs=split_flag(args.output),
        platforms=split_flag(args.platform),
    )


def plan_of(args: argparse.Namespace, manifest: Manifest) -> Plan:
    """The plan of the selection (and --since); for build and plan, a note on stderr
    about groups that leave nothing to build (a binary named that cannot be: exit 2)."""
    from shipyard.engine.planning import plan_for
    from shipyard.engine.selecting import unbuildable

    selection = selection_of(args)
    since = getattr(args, "since", None)
    plan = plan_for(manifest, selection, since=since, env=os.environ, cache_dir=cache_dir(args))
    if args.command in ("build", "plan") and not (since and not plan.binaries):
        note = unbuildable(plan, selection)
        if note:
            print(note, file=sys.stderr)
    return plan


def nothing_since(args: argparse.Namespace, plan: Plan) -> bool:
    """With --since and nothing affected: say so; the command succeeds doing nothing
    (and leaves dist/ and its report as they are)."""
    if not getattr(args, "since", None) or plan.binaries:
        return False
    print(f"nothing affected since {args.since}", file=sys.stderr)
    return True


def print_plan(plan: Plan, as_json: bool) -> None:
    """The plan's actions, one a line (or the plan as JSON), then what it skips."""
    if as_json:
        print(json.dumps(plan.to_json(), indent=2))
        return
    root = plan.manifest.root
    for action in plan.actions:
        extra = f" [{', '.join(action.platforms)}]" if action.platforms else ""
        after = f" after {', '.join(action.deps)}" if action.deps else ""
        print(f"{action.id}{extra} ({action.source.relative_to(root)}){after}")
    for skip in plan.skips:
        print(f"skip {skip.binary}: {skip.reason}")
