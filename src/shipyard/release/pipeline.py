"""The release pipeline: one ordered tuple of stages, and the runner that walks it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from shipyard.builders import BUILDERS
from shipyard.engine.plan import Selection
from shipyard.engine.planning import plan_for
from shipyard.engine.scheduler import Builder
from shipyard.manifest import load_manifest
from shipyard.oci.remote.push import default_registry
from shipyard.oci.remote.registry import Registry
from shipyard.release.building import Build, Validate
from shipyard.release.context import ReleaseContext, ReleaseOptions, Stage, StageResult
from shipyard.release.index import PackageIndex, index_from_env
from shipyard.release.preflight import Preflight
from shipyard.release.publish import Publish, Verify
from shipyard.release.staging import StageRelease
from shipyard.stamp import read_stamp

__all__ = ["PIPELINE", "prepare_release", "release", "run_pipeline"]

PIPELINE: tuple[Stage, ...] = (
    # Version, tree, tags, staging folder, hubs and index: all before anything is built.
    Preflight(),
    # Every output of the plan, through the build engine and its cache.
    Build(),
    # Smoke runs of zipapps, wheel metadata, every platform in every image.
    Validate(),
    # dist/release/<version>/: artifacts, SBOMs, SHA256SUMS, release.json, changelog.
    StageRelease(),
    # Staged files re-checked; images by digest to every hub, wheels, then every tag.
    Publish(),
    # Pull every tag and wheel back; compare with release.json.
    Verify(),
)


def run_pipeline(
    ctx: ReleaseContext,
    stages: Sequence[Stage] = PIPELINE,
    on_result: Callable[[StageResult], None] = lambda _: None,
) -> list[StageResult]:
    """Run `stages` in order, recording a result for each in `ctx.results`.

    A skip is an outcome with its reason. The first failure is recorded, the
    stages after it are recorded as skipped, and the error is raised again.
    """
    for position, stage in enumerate(stages):
        start = time.monotonic()
        reason = stage.skip(ctx)
        if reason is not None:
            result = StageResult(stage.name, "skipped", reason, time.monotonic() - start)
        else:
            try:
                stage.run(ctx)
            except BaseException as exc:
                failed = StageResult(stage.name, "failed", str(exc), time.monotonic() - start)
                ctx.results.append(failed)
                on_result(failed)
                for later in stages[position + 1 :]:
                    skipped = StageResult(later.name, "skipped", f"{stage.name} failed")
                    ctx.results.append(skipped)
                    on_result(skipped)
                raise
            result = StageResult(stage.name, "ran", "", time.monotonic() - start)
        ctx.results.append(result)
        on_result(result)
    return ctx.results


def prepare_release(
    manifest_path: Path,
    options: ReleaseOptions,
    *,
    selection: Selection | None = None,
    since: str | None = None,
    env: Mapping[str, str] | None = None,
    builders: Mapping[str, Builder] = BUILDERS,
    registry_for: Callable[[str], Registry] | None = None,
    index: PackageIndex | None = None,
    on_step: Callable[[str], None] = lambda _: None,
) -> ReleaseContext:
    """Read the edge once (manifest, stamp, environment) into a context; checks nothing.

    The version is chosen as `build` chooses it (`stamp.choose_version`): a
    snapshot's is the git-describe dev version, else --version, $VERSION, then
    project.version. It is only checked in preflight, so a bad one fails there
    like every other preflight problem.
    """
    environ = dict(os.environ if env is None else env)
    manifest = load_manifest(manifest_path, environ)
    stamp = read_stamp(
        manifest.root,
        manifest.project.version,
        environ,
        options.version,
        snapshot=options.snapshot,
        check=False,  # preflight checks it, so a bad one fails there like other problems
        tag_prefix=manifest.project.tag_prefix_for(),
    )
    plan = plan_for(
        manifest, selection or Selection(), since=since, env=environ, cache_dir=options.cache_dir
    )
    return ReleaseContext(
        manifest=manifest,
        plan=plan,
        stamp=stamp,
        options=options,
        env=environ,
        builders=builders,
        registry_for=registry_for or (lambda host: default_registry(host, environ)),
        index=index if index is not None else index_from_env(environ),
        on_step=on_step,
    )


def release(ctx: ReleaseContext, on_result: Callable[[StageResult], None] = lambda _: None) -> None:
    """Run the whole pipeline on `ctx`; results are in `ctx.results` even when it raises."""
    run_pipeline(ctx, PIPELINE, on_result)
