"""`shipyard push` and `shipyard release`: what was built, sent to the hubs and the index."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from shipyard.cli._args import cache_dir, manifest_of, nothing_since, plan_of, selection_of
from shipyard.engine.plan import split_flag
from shipyard.errors import UsageError
from shipyard.manifest import find_manifest

__all__ = ["push_command", "release_command"]


def _step(line: str) -> None:
    print(line, file=sys.stderr)


def push_command(args: argparse.Namespace) -> int:
    """`shipyard push`: the images the last build made, to every hub of their binaries."""
    from shipyard.release.push import push_built

    plan = plan_of(args, manifest_of(args, cached=True))
    if nothing_since(args, plan):
        return 0
    pushed = push_built(
        plan,
        os.environ,
        tags=split_flag(args.tag),
        allow_partial=args.allow_partial,
        force_protected=args.force_protected,
        on_step=_step,
    )
    for result in pushed:
        print(f"{result.name}@{result.digest} tags: {', '.join(result.tags)}")
    return 0


def release_command(args: argparse.Namespace) -> int:
    """`shipyard release`: the whole pipeline; prints the release folder."""
    from shipyard.release import ReleaseOptions, index_from_env, prepare_release, release
    from shipyard.release.building import build_request

    path = args.file if args.file else find_manifest(Path.cwd())
    options = ReleaseOptions(
        version=args.release_version,
        snapshot=args.snapshot,
        dry_run=args.dry_run,
        allow_dirty=args.allow_dirty,
        clean=args.clean,
        jobs=args.jobs,
        cache_dir=cache_dir(args),
        remote=args.remote,
        cache_mode=args.cache_mode,
        force_protected=args.force_protected,
        clobber=args.clobber,
        signing_key=Path(args.signing_key) if args.signing_key else None,
    )
    if args.since and not args.snapshot:
        raise UsageError(
            f"--since={args.since}: a release ships every selected binary at one version; "
            "use --since with release --snapshot, or select with --target/--binary"
        )
    ctx = prepare_release(
        path,
        options,
        selection=selection_of(args),
        since=args.since,
        index=index_from_env(os.environ, args.index_url),
        on_step=_step,
    )
    if nothing_since(args, ctx.plan):
        return 0
    build_request(ctx).check()  # a bad --cache or -j fails before preflight asks any hub
    release(
        ctx,
        on_result=lambda r: print(
            f"{r.name:<10} {r.status:<8} {r.duration:6.1f}s {r.reason}", file=sys.stderr
        ),
    )
    if ctx.build is not None and ctx.build.remote is not None:
        print(f"shipyard: {ctx.build.remote.line()}", file=sys.stderr)
    print(ctx.release_dir)
    return 0
