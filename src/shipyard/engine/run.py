"""One build, start to finish: lock, sweep, plan, run with the cache, report."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard._environ import CACHE_DIR
from shipyard._fs import atomic_write, exclusive, remove_stale_temps
from shipyard.dist import dist_dir, lock_file, outputs_file, report_file, source_digests_file
from shipyard.engine.cache.local import ActionCache, OutputCache, cache_limit
from shipyard.engine.plan import Plan
from shipyard.engine.report import previous_actions, previous_durations, write_report
from shipyard.engine.scheduler import BuildContext, Builder, Event, Result, run_plan
from shipyard.engine.wrapper import Cached, Keyed, Runner, Translated
from shipyard.files.sources import GitIgnored
from shipyard.files.statcache import StatMemo
from shipyard.process import reset
from shipyard.stamp import Stamp

if TYPE_CHECKING:
    from shipyard.engine.cache.mode import CacheMode
    from shipyard.engine.cache.policy import GuardedRemote, RemoteSummary

__all__ = ["BuildOptions", "BuildRun", "execute", "replace_outputs", "wrapped"]


def wrapped(builder: Builder, cache: OutputCache | None = None, *, force: bool = False) -> Runner:
    """`builder` inside the engine's layers, outermost first: error translation, the
    cache (when there is one; `force`: never a hit), the key."""
    keyed = Keyed(builder)
    return Translated(keyed if cache is None else Cached(keyed, cache, force=force))


@dataclass(frozen=True)
class BuildOptions:
    """How to run a plan: parallelism, failure policy and the cache."""

    jobs: int | None = None
    keep_going: bool = False
    cache_dir: Path | None = None  # None: no cache
    force: bool = False
    remote: str | None = None  # --cache=URL: a cache shared by machines (oci, http, grpc)
    cache_mode: CacheMode = "read-write"  # how the shared cache is used (--cache-mode)


@dataclass(frozen=True)
class BuildRun:
    """The results of one build and where its report went."""

    plan: Plan
    context: BuildContext
    results: tuple[Result, ...]
    report: Path
    remote: RemoteSummary | None = None  # what the build did with its shared cache

    @property
    def exit_code(self) -> int:
        """0, or 2 if any failure came from bad input, else 1."""
        return max((r.exit_code for r in self.failed), default=0)

    @property
    def failed(self) -> tuple[Result, ...]:
        """The actions that failed."""
        return tuple(r for r in self.results if r.status == "failed")


def execute(
    plan: Plan,
    stamp: Stamp,
    builders: Mapping[str, Builder],
    options: BuildOptions,
    *,
    env: Mapping[str, str] | None = None,
    on_event: Callable[[Event], None] = lambda _: None,
    git: GitIgnored | None = None,
    stamps: Mapping[str, Stamp] | None = None,
) -> BuildRun:
    """Build `plan` into <root>/dist.

    Holds dist/.lock for the whole build, so two builds in one checkout take
    turns; sweeps temporaries a killed build left. On KeyboardInterrupt the engine
    ends the running subprocesses, and their builders remove their temporaries.
    `git` shares what git ignores (see GitIgnored.prefetch).
    `stamps` are per-action stamps by action id (see `BuildContext.stamps`).
    A build that stored anything in the cache then prunes it to its limit
    (`ActionCache.auto_prune`, $SHIPYARD_CACHE_MAX_SIZE, default 512M).
    """
    root = plan.manifest.root
    dist = dist_dir(root)
    build_env = dict(os.environ if env is None else env)
    if options.cache_dir is not None:
        # Builders with caches of their own (base image blobs) keep them beside ours.
        build_env[CACHE_DIR.name] = str(options.cache_dir)
    # Source digests remembered by stat, for files at least two seconds old (see StatMemo).
    digests = StatMemo(source_digests_file(dist), settle_ns=2_000_000_000)
    ctx = BuildContext(
        root,
        dist,
        stamp,
        plan.manifest.project.python,
        build_env,
        git=git or GitIgnored(root),
        digests=digests,
        workspace=plan.workspace,
        stamps=dict(stamps or {}),
    )
    local, limit, cache, shared = _caches(options, build_env)
    runners = {k: wrapped(b, cache, force=options.force) for k, b in builders.items()}
    with exclusive(lock_file(dist)):
        results, report = _run_locked(plan, ctx, runners, options, on_event, shared)
        digests.save()
    if local is not None:
        local.auto_prune(limit)  # only when this build stored something: not on a no-op
    summary = shared.summary() if shared is not None else None
    return BuildRun(plan, ctx, tuple(results), report, summary)


def _caches(
    options: BuildOptions, env: Mapping[str, str]
) -> tuple[ActionCache | None, int | None, OutputCache | None, GuardedRemote | None]:
    """The local action cache, its size limit, the cache the actions use (the local
    one, with the shared cache behind it for --cache, under --cache-mode) and that
    shared cache (None for what is not there)."""
    if options.cache_dir is None:
        return None, None, None, None
    limit = cache_limit(env)  # a bad $SHIPYARD_CACHE_MAX_SIZE: exit 2 before building
    local = ActionCache(options.cache_dir)
    if not options.remote:
        return local, limit, local, None
    from shipyard.engine.cache.policy import open_guarded
    from shipyard.engine.cache.tiered import TieredCache

    shared = open_guarded(options.remote, options.cache_mode, env)
    tiered = TieredCache(local, shared, upload_local_hits=shared.uploads_local_hits)
    return local, limit, tiered, shared


def _run_locked(
    plan: Plan,
    ctx: BuildContext,
    runners: Mapping[str, Runner],
    options: BuildOptions,
    on_event: Callable[[Event], None],
    shared: GuardedRemote | None = None,
) -> tuple[list[Result], Path]:
    """Run the plan under dist/.lock, then write the report and replace the outputs an
    earlier build of each action left under another name."""
    dist = ctx.dist
    earlier = previous_actions(report_file(dist))
    durations = previous_durations(earlier)
    remove_stale_temps(dist)
    reset()
    try:
        results = run_plan(
            plan,
            ctx,
            runners,
            jobs=options.jobs,
            keep_going=options.keep_going,
            on_event=on_event,
            durations=durations,
        )
    except KeyboardInterrupt:
        # Builders remove their temporaries as they unwind; a worker caught
        # between steps may not, so sweep under the lock we still hold.
        remove_stale_temps(dist)
        raise
    remote = shared.summary().to_json() if shared is not None else None
    report = write_report(plan, results, ctx, durations, earlier, remote)
    replace_outputs(dist, ctx.root, results)
    return results, report


# The outputs named by version, one per platform: what a new version supersedes. An
# image layout's blobs are the builder's to manage (it writes the layout whole).
_VERSIONED = (".pyz", ".whl", ".tar")


def replace_outputs(dist: Path, root: Path, results: Sequence[Result]) -> list[Path]:
    """Remove what an action wrote in an earlier build for a platform it built again
    under another name (a zipapp of the previous development version, say), so dist/
    holds what the last build of each action made: one file per platform. Only wheels,
    zipapps and image tarballs a shipyard build recorded as that action's outputs
    (`dist/.outputs.json`, kept across builds of any selection) are removed: never
    another file, nor one another action still lists, nor one of a platform this build
    did not make (a `--platform` subset), nor anything under dist/release/; called once
    the new outputs are in place. Returns what was removed."""
    record_path = outputs_file(dist)
    try:
        loaded = json.loads(record_path.read_bytes())
        earlier = {
            str(k): [(str(p[0]), str(p[1])) for p in v if isinstance(p, list) and len(p) == 2]
            for k, v in loaded.items()
            if isinstance(v, list)
        }
    except (OSError, ValueError, AttributeError, TypeError):
        earlier = {}
    record = dict(earlier)
    made: dict[str, set[str]] = {}
    for result in results:
        if result.status in ("built", "cached"):
            record[result.action.id] = sorted(
                (
                    str(a.path.relative_to(root)) if a.path.is_relative_to(root) else str(a.path),
                    "" if a.kind == "wheel" else a.platform,
                )
                for a in result.outputs
            )
            made[result.action.id] = {platform for _, platform in record[result.action.id]}
    current = {path for paths in record.values() for path, _ in paths}
    removed: list[Path] = []
    for action_id, platforms in made.items():
        for text, platform in set(earlier.get(action_id, ())) - set(record[action_id]):
            if text in current or platform not in platforms or not text.endswith(_VERSIONED):
                continue
            path = root / text
            resolved = path.resolve()
            if not resolved.is_relative_to(dist.resolve()) or resolved.is_relative_to(
                (dist / "release").resolve()
            ):
                continue
            try:
                if path.is_file() and not path.is_symlink():
                    path.unlink()
                    removed.append(path)
            except OSError:
                continue  # left in place: the next build tries again
    if record != earlier:
        data = {k: [list(entry) for entry in v] for k, v in record.items()}
        with contextlib.suppress(OSError):  # not recorded: nothing removed next time
            atomic_write(record_path, json.dumps(data, sort_keys=True).encode(), durable=False)
    return removed
