"""The `shipyard` command: the one place that prints and chooses exit codes."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard import __version__
from shipyard.engine.cache.local import default_cache_dir
from shipyard.engine.plan import Plan, Selection, split_flag
from shipyard.errors import ShipyardError, UsageError
from shipyard.manifest import find_manifest, load_manifest

if TYPE_CHECKING:
    from shipyard.engine.build import BuildRequest
    from shipyard.engine.scheduler import Result
    from shipyard.manifest import Manifest

# Each command imports what it needs when it runs: `check`, `plan`, `schema` and
# `--version` never load the builders, oci, the HTTP clients or the release stages
# (tests/unit/test_cli_imports.py), so they start fast and work in the zipapp.

__all__ = ["main", "parser", "run"]


def _common(default: object = argparse.SUPPRESS) -> argparse.ArgumentParser:
    # Subcommands default to SUPPRESS so `shipyard -f X check` keeps the top-level -f.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-f",
        "--file",
        type=Path,
        default=default,
        help="the manifest (default: binaries.yaml here or above)",
    )
    return common


def _selection() -> argparse.ArgumentParser:
    sel = argparse.ArgumentParser(add_help=False)
    for flag, meta, text in (
        ("--target", "GROUP", "a group from binaries.yaml (default: all)"),
        ("--binary", "NAME", "a binary by name"),
        ("--output", "KIND", "wheel, zipapp or image"),
        ("--platform", "OS/ARCH", "e.g. linux/arm64"),
    ):
        sel.add_argument(flag, action="append", metavar=meta, help=text + "; repeatable, a,b ok")
    sel.add_argument(
        "--since",
        metavar="REF",
        help="only the binaries whose inputs changed since the git REF (see `affected`)",
    )
    sel.add_argument("--json", action="store_true", help="print JSON for machines")
    sel.add_argument(
        "--version",
        dest="release_version",
        metavar="X",
        help="the version to stamp (default: $VERSION, then project.version)",
    )
    return sel


_FORCE_PROTECTED = "push to image.protected hubs outside CI (default: only when CI is set)"


def parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    top = argparse.ArgumentParser(
        prog="shipyard",
        description="Wheels, zipapps and images from binaries.yaml.",
        parents=[_common(None)],
    )
    # `--version` here prints shipyard's version (as invoke, nox, docker and uv do);
    # after a command it is the version to stamp. `--tool-version` stays as an alias.
    top.add_argument(
        "--version", "--tool-version", action="version", version=f"shipyard {__version__}"
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("check", parents=[_common()], help="validate the manifest")
    sub.add_parser("plan", parents=[_common(), _selection()], help="print the action graph")
    build = sub.add_parser("build", parents=[_common(), _selection()], help="build outputs")
    build.add_argument("-j", "--jobs", type=int, default=None, help="parallel actions (CPUs)")
    build.add_argument("--dry-run", action="store_true", help="print the plan, build nothing")
    build.add_argument(
        "--keep-going",
        action="store_true",
        help="after a failure, finish what does not depend on it",
    )
    build.add_argument("--cache-dir", help="action cache (default: $SHIPYARD_CACHE_DIR, XDG)")
    build.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    build.add_argument("--force", action="store_true", help="ignore cache hits; rebuild all")
    build.add_argument(
        "--cache", dest="remote", metavar="oci://HOST/REPO", help="also share a registry cache"
    )
    build.add_argument("--shard", metavar="I/N", help="build only slice I of N of the actions")
    cache = sub.add_parser("cache", help="show or prune every part of the cache")
    cache.add_argument("action", choices=["prune", "info"])
    cache.add_argument("--cache-dir", help="action cache (default: $SHIPYARD_CACHE_DIR, XDG)")
    cache.add_argument(
        "--max-size",
        help="prune down to this size (bytes, or K/M/G/T; default $SHIPYARD_CACHE_MAX_SIZE, 10G)",
    )
    push = sub.add_parser(
        "push", parents=[_common(), _selection()], help="push built images to every hub"
    )
    push.add_argument("--tag", action="append", help="tags to push (default: image.tags)")
    push.add_argument(
        "--allow-partial",
        action="store_true",
        help="push an image that lacks some of the binary's declared platforms",
    )
    push.add_argument("--force-protected", action="store_true", help=_FORCE_PROTECTED)
    release = sub.add_parser(
        "release",
        parents=[_common(), _selection()],
        help="preflight, build, validate, stage, publish, verify",
    )
    release.add_argument("-j", "--jobs", type=int, default=None, help="parallel build actions")
    release.add_argument("--snapshot", action="store_true", help="build and stage; publish nothing")
    release.add_argument("--dry-run", action="store_true", help="print every publish step only")
    release.add_argument("--allow-dirty", action="store_true", help="release a modified tree")
    release.add_argument("--clean", action="store_true", help="replace dist/release/<version>")
    release.add_argument("--index-url", help="package index upload URL ($SHIPYARD_INDEX_URL)")
    release.add_argument("--cache-dir", help="action cache (default: $SHIPYARD_CACHE_DIR, XDG)")
    release.add_argument(
        "--cache", dest="remote", metavar="oci://HOST/REPO", help="also share a registry cache"
    )
    release.add_argument("--force-protected", action="store_true", help=_FORCE_PROTECTED)
    release.add_argument(
        "--clobber",
        action="store_true",
        help="move existing tags that are not image.movable_tags (default: refuse)",
    )
    release.add_argument(
        "--signing-key",
        metavar="PATH",
        help="PEM ECDSA P-256 key to sign the release with (default: $SHIPYARD_SIGNING_KEY)",
    )
    sub.add_parser(
        "affected",
        parents=[_common(), _selection()],
        help="list the binaries whose inputs changed since --since=REF, and why",
    )
    sub.add_parser(
        "init", parents=[_common()], help="write a first binaries.yaml from the projects here"
    )
    sub.add_parser("schema", help="print the manifest's JSON Schema")
    sub.add_parser("clean", parents=[_common()], help="remove dist/")
    from shipyard.cli import _promote, _sign, _test  # their own modules: argparse only until run

    _test.add_parser(sub, _common())
    _promote.add_parser(sub, _common())
    _sign.add_parsers(sub, _common())
    return top


def _manifest(args: argparse.Namespace, *, cached: bool = False) -> Manifest:
    path = args.file if args.file else find_manifest(Path.cwd())
    if not path.exists():
        raise UsageError(f"-f {path}: no such file; pass the path of binaries.yaml")
    use_cache = cached and not getattr(args, "no_cache", False)
    cache_dir = default_cache_dir(getattr(args, "cache_dir", None), os.environ)
    return load_manifest(path, cache_dir=cache_dir if use_cache else None)


def _selected(args: argparse.Namespace) -> Selection:
    return Selection(
        targets=split_flag(args.target),
        binaries=split_flag(args.binary),
        outputs=split_flag(args.output),
        platforms=split_flag(args.platform),
    )


def _plan(args: argparse.Namespace, manifest: Manifest) -> Plan:
    from shipyard.engine.plan import unbuildable
    from shipyard.engine.planning import plan_for

    selection = _selected(args)
    since = getattr(args, "since", None)
    cache_dir = default_cache_dir(getattr(args, "cache_dir", None), os.environ)
    plan = plan_for(manifest, selection, since=since, env=os.environ, cache_dir=cache_dir)
    if args.command in ("build", "plan") and not (since and not plan.binaries):
        # Named but unbuildable: exit 2 here; groups that leave nothing: say so.
        note = unbuildable(plan, selection)
        if note:
            print(note, file=sys.stderr)
    return plan


def _affected(args: argparse.Namespace) -> int:
    from shipyard.engine.affected import affected
    from shipyard.engine.plan import make_plan
    from shipyard.engine.planning import read_workspace

    if not args.since:
        raise UsageError("affected needs --since=REF (a git commit, branch or tag to compare with)")
    manifest = _manifest(args, cached=True)
    workspace = read_workspace(
        manifest, cache_dir=default_cache_dir(getattr(args, "cache_dir", None), os.environ)
    )
    selected = make_plan(manifest, _selected(args), workspace=workspace).binary_names
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


def _nothing_since(args: argparse.Namespace, plan: Plan) -> bool:
    """With --since and nothing affected: say so; the command succeeds doing nothing
    (and leaves dist/ and its report as they are)."""
    if not getattr(args, "since", None) or plan.binaries:
        return False
    print(f"nothing affected since {args.since}", file=sys.stderr)
    return True


def _print_plan(plan: Plan, as_json: bool) -> None:
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


def _plan_command(args: argparse.Namespace) -> int:
    """`shipyard plan`: the build's actions, then every project's test stages."""
    plan = _plan(args, _manifest(args, cached=True))
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
    _print_plan(plan, False)
    if tests is not None and tests.plan.actions:
        from shipyard.cli._test import print_stages

        print("test stages (shipyard test):")
        print_stages(tests, prefix="  ")
    return 0


def _build(args: argparse.Namespace) -> int:
    manifest = _manifest(args, cached=True)
    plan = _plan(args, manifest)
    if _nothing_since(args, plan):
        return 0
    if args.dry_run:
        _print_plan(plan, args.json)
        return 0
    if not plan.actions:  # `_plan` said why; leave dist/ and its report as they are
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
        run = build(plan, _request(args), BUILDERS, on_plan=planned, on_event=display)
    finally:
        display.close()
    plan = run.plan
    if args.json:
        print(json.dumps(report_json(plan, run.results, run.context), indent=2))
    else:
        display.summary(run.results)
    for result in run.failed:
        print(f"shipyard: {result.reason}", file=sys.stderr)
    _warn_sizes(plan, run.results)
    return run.exit_code


def _request(args: argparse.Namespace) -> BuildRequest:
    """The engine's request for `shipyard build`'s flags."""
    from shipyard.engine.build import BuildRequest

    return BuildRequest(
        version=args.release_version,
        jobs=args.jobs,
        keep_going=args.keep_going,
        cache_dir=None if args.no_cache else default_cache_dir(args.cache_dir, os.environ),
        force=args.force,
        remote=args.remote,
        shard=args.shard,
        env=os.environ,
    )


def _warn_sizes(plan: Plan, results: Sequence[Result]) -> None:
    """A warning per output outside its size budget; a build still succeeds (release
    validate is where a budget fails)."""
    if not any(b.size for b in plan.binaries):
        return
    from shipyard.release.budgets import check_sizes

    for finding in check_sizes(plan.binaries, results):
        print(f"warning: {finding.message(plan.manifest.root)}", file=sys.stderr)


def _cache(args: argparse.Namespace) -> int:
    import datetime

    from shipyard.engine.cache.local import MAX_SIZE_ENV, ActionCache, cache_limit, parse_size
    from shipyard.engine.cache.usage import human_size

    def sized(size: int) -> str:
        return f"{human_size(size)} ({size} bytes)" if size >= 1024 else human_size(size)

    cache = ActionCache(default_cache_dir(args.cache_dir, os.environ))
    limit = cache_limit(os.environ)
    limit_text = (
        f"automatic prune off ({MAX_SIZE_ENV}={os.environ.get(MAX_SIZE_ENV)})"
        if limit is None
        else f"limit {human_size(limit)} ({MAX_SIZE_ENV}, default 10G)"
    )
    if args.action == "prune":
        if args.max_size:
            limit = parse_size(args.max_size, "--max-size")
        elif limit is None:
            raise UsageError(
                f"{MAX_SIZE_ENV}={os.environ.get(MAX_SIZE_ENV)} turns the automatic prune off; "
                "give the size to prune to: shipyard cache prune --max-size=10G"
            )
        pruned = cache.prune(limit)
        print(
            f"removed {pruned.removed_entries} entries and {pruned.removed_files} other files, "
            f"{sized(pruned.removed_bytes)}; {sized(pruned.kept_bytes)} kept in {cache.dir} "
            f"(pruned to {human_size(limit)})"
        )
        if pruned.shared:
            print(
                "another build is using the cache: its base image blobs (oci/) and blobs "
                "no entry names yet were kept; run `shipyard cache prune` again when none runs"
            )
        return 0
    found = cache.usage()
    print(f"{cache.dir}: {sized(found.managed)} stored by builds; {limit_text}")
    for part in found.parts:
        note = "" if part.pruned else ", not pruned, not counted"
        print(f"  {part.folder + '/':<12}{part.what}{note}: {part.describe()}, {sized(part.size)}")
    last = cache.last_auto_prune()
    if last is not None:
        when = datetime.datetime.fromtimestamp(last.time).strftime("%Y-%m-%d %H:%M:%S")
        done = (
            f"under its limit of {human_size(last.limit)}"
            if last.removed_bytes is None
            else f"over its limit of {human_size(last.limit)}, removed {sized(last.removed_bytes)}"
            + (" (another build held what it uses)" if last.shared else "")
        )
        print(f"last automatic check, after a build at {when}: {sized(last.size)}, {done}")
    return 0


def _push(args: argparse.Namespace) -> int:
    from shipyard.release.push import push_built

    manifest = _manifest(args, cached=True)
    plan = _plan(args, manifest)
    if _nothing_since(args, plan):
        return 0
    pushed = push_built(
        plan,
        os.environ,
        tags=split_flag(args.tag),
        allow_partial=args.allow_partial,
        force_protected=args.force_protected,
        on_step=lambda line: print(line, file=sys.stderr),
    )
    for result in pushed:
        print(f"{result.name}@{result.digest} tags: {', '.join(result.tags)}")
    return 0


def _release(args: argparse.Namespace) -> int:
    from shipyard.release import ReleaseOptions, index_from_env, prepare_release, release

    path = args.file if args.file else find_manifest(Path.cwd())
    options = ReleaseOptions(
        version=args.release_version,
        snapshot=args.snapshot,
        dry_run=args.dry_run,
        allow_dirty=args.allow_dirty,
        clean=args.clean,
        jobs=args.jobs,
        cache_dir=default_cache_dir(args.cache_dir, os.environ),
        remote=args.remote,
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
        selection=_selected(args),
        since=args.since,
        index=index_from_env(os.environ, args.index_url),
        on_step=lambda line: print(line, file=sys.stderr),
    )
    if _nothing_since(args, ctx.plan):
        return 0
    from shipyard.release.building import build_request

    build_request(ctx).check()  # a bad --cache or -j fails before preflight asks any hub
    release(
        ctx,
        on_result=lambda r: print(
            f"{r.name:<10} {r.status:<8} {r.duration:6.1f}s {r.reason}", file=sys.stderr
        ),
    )
    print(ctx.release_dir)
    return 0


def _init(args: argparse.Namespace) -> int:
    from shipyard._fs import atomic_write
    from shipyard.init import first_manifest
    from shipyard.workspace import load_workspace

    path = Path(args.file) if getattr(args, "file", None) else Path.cwd() / "binaries.yaml"
    if path.exists():
        raise UsageError(f"{path}: already exists; init never overwrites: remove it first")
    workspace = load_workspace(path.parent.resolve())
    made = first_manifest(workspace, path.parent)
    atomic_write(path, made.text.encode())
    print(f"wrote {path}: {made.binaries} binaries from {made.projects} projects")
    for note in made.skipped:
        print(f"  not listed: {note}")
    return 0


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "init":
        return _init(args)
    if args.command == "schema":
        from shipyard.manifest import json_schema

        print(json.dumps(json_schema(), indent=2))
        return 0
    if args.command == "check":
        from shipyard.engine.planning import read_workspace
        from shipyard.entrypoints import check_own_entrypoints

        manifest = _manifest(args)
        check_own_entrypoints(manifest)
        workspace = read_workspace(manifest)
        groups = ", ".join(sorted(manifest.groups))
        lock = "; " + "; ".join(workspace.lock_status) if workspace.lock_status else ""
        print(
            f"{manifest.path}: ok, {len(manifest.binaries)} binaries, "
            f"{len(workspace.projects)} projects{lock}; groups: {groups}"
        )
        return 0
    if args.command == "affected":
        return _affected(args)
    if args.command == "plan":
        return _plan_command(args)
    if args.command == "test":
        from shipyard.cli import _test

        return _test.run(args, _manifest(args, cached=True))
    if args.command == "cache":
        return _cache(args)
    if args.command == "push":
        return _push(args)
    if args.command == "release":
        return _release(args)
    if args.command == "promote":
        from shipyard.cli import _promote

        return _promote.run(args, _manifest(args))
    if args.command in ("keygen", "verify"):
        from shipyard.cli import _sign

        return _sign.run_keygen(args) if args.command == "keygen" else _sign.run_verify(args)
    if args.command == "clean":
        root = _manifest(args).root
        shutil.rmtree(root / "dist", ignore_errors=True)
        return 0
    return _build(args)


class _StderrHandler(logging.Handler):
    """Writes the library's warnings (retries and their reasons) to the current stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"shipyard: {record.getMessage()}", file=sys.stderr)


def _log_to_stderr() -> None:
    """The library logs (never prints); the CLI shows warnings such as retries."""
    logger = logging.getLogger("shipyard")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler(logging.WARNING))
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code (0 ok, 1 a step failed, 2 bad input)."""
    args = parser().parse_args(argv)
    _log_to_stderr()
    try:
        return _dispatch(args)
    except ShipyardError as exc:
        print(f"shipyard: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("shipyard: interrupted", file=sys.stderr)
        return 130


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
