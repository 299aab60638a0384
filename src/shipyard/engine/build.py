"""The one way to build a plan: `shipyard build` and a release's Build stage both call `build`.

A `BuildRequest` is what the user asked for (the version, -j, --keep-going, the
local and the shared cache with its mode, a shard). `build` checks it, reads the stamp
(unless the caller read it at its edge, as a release does), works out each
action's own stamp, takes the shard and runs the plan (`shipyard.engine.run.execute`).
So a release builds exactly as `shipyard build --version=<the release's version>` does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from shipyard.engine.cache.mode import cache_mode
from shipyard.engine.plan import Plan, shard
from shipyard.engine.run import BuildOptions, BuildRun, execute
from shipyard.engine.scheduler import Builder, Event
from shipyard.engine.stamps import action_stamps
from shipyard.errors import UsageError
from shipyard.files.sources import GitIgnored
from shipyard.stamp import Stamp, read_stamp

__all__ = ["BuildRequest", "build", "check_jobs", "check_remote", "parse_shard"]


def check_jobs(jobs: int | None) -> None:
    """UsageError (exit 2) unless -j is unset or at least 1."""
    if jobs is not None and jobs < 1:
        raise UsageError(f"-j {jobs}: give at least 1")


def parse_shard(text: str) -> tuple[int, int]:
    """`I/N` as (I, N); UsageError (exit 2) naming --shard when it is not two numbers
    (the range is `shard`'s to check)."""
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit()):
        raise UsageError(f"--shard={text}: write I/N, e.g. --shard=1/2")
    return int(index), int(count)


def check_remote(url: str | None) -> None:
    """UsageError (exit 2) unless --cache is unset or a cache URL (oci, http[s], grpc[s])."""
    if url:
        from shipyard.engine.cache.endpoint import parse_endpoint

        parse_endpoint(url)


@dataclass(frozen=True)
class BuildRequest:
    """What a build was asked for: the flags of `shipyard build`, and of a release's build."""

    version: str | None = None  # --version; None: $VERSION, then project.version
    jobs: int | None = None  # -j; None: one action per CPU
    keep_going: bool = False  # after a failure, finish what does not depend on it
    cache_dir: Path | None = None  # the local action cache; None: no cache
    force: bool = False  # ignore cache hits
    remote: str | None = None  # --cache=URL: a cache shared by machines (oci, http, grpc)
    cache_mode: str | None = None  # --cache-mode; None: $SHIPYARD_CACHE_MODE, else read-write
    shard: str | None = None  # --shard=I/N: only slice I of N of the actions
    env: Mapping[str, str] | None = None  # None: os.environ

    def check(self) -> None:
        """UsageError (exit 2) naming the first flag that cannot work: -j, --cache,
        --cache-mode (or $SHIPYARD_CACHE_MODE), --shard."""
        check_jobs(self.jobs)
        check_remote(self.remote)
        cache_mode(self.cache_mode, self._env)
        if self.shard:
            parse_shard(self.shard)

    def options(self) -> BuildOptions:
        """How `execute` runs the plan."""
        return BuildOptions(
            jobs=self.jobs,
            keep_going=self.keep_going,
            cache_dir=self.cache_dir,
            force=self.force,
            remote=self.remote,
            cache_mode=cache_mode(self.cache_mode, self._env),
        )

    @property
    def _env(self) -> Mapping[str, str]:
        return os.environ if self.env is None else self.env


def build(
    plan: Plan,
    request: BuildRequest,
    builders: Mapping[str, Builder],
    *,
    stamp: Stamp | None = None,
    on_plan: Callable[[Plan], None] = lambda _: None,
    on_event: Callable[[Event], None] = lambda _: None,
) -> BuildRun:
    """Build `plan` as `request` asks, into <root>/dist.

    The flags are checked before git or any builder runs. `stamp` is the build's
    stamp when the caller has read it (a release, at its edge); otherwise it is read
    here, with `request.version`. Each action gets its own stamp (its revision and
    clock from the last commit that changed its inputs; `action_stamps`), worked out
    over the whole plan; then the plan is cut to the shard. `on_plan` is told the
    plan that will run, before its first action starts.
    """
    request.check()
    env = os.environ if request.env is None else request.env
    root = plan.manifest.root
    git = GitIgnored(root).prefetch()  # git answers while the stamp is read
    if stamp is None:
        project = plan.manifest.project
        prefix = project.tag_prefix_for()
        stamp = read_stamp(root, project.version, env, request.version, tag_prefix=prefix)
    stamps = action_stamps(plan, stamp, request.version, env)
    if request.shard:
        plan = shard(plan, *parse_shard(request.shard))
    on_plan(plan)
    return execute(
        plan, stamp, builders, request.options(), env=env, on_event=on_event, git=git, stamps=stamps
    )
