"""The release runner: order, typed skips, stop at the first failure; the literal pipeline."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from shipyard.engine.plan import Plan
from shipyard.errors import BuildError, UsageError
from shipyard.manifest import Binary, Image, Manifest, Project
from shipyard.oci.remote.registry import Registry
from shipyard.release import PIPELINE, ReleaseContext, ReleaseOptions, run_pipeline
from shipyard.stamp import Stamp


def make_context(tmp_path: Path, options: ReleaseOptions | None = None) -> ReleaseContext:
    """A context over an empty manifest: enough for stages that only record calls."""
    manifest = Manifest(
        tmp_path / "binaries.yaml", tmp_path, Project("demo", "git", "3.11"), {}, {}
    )
    return ReleaseContext(
        manifest=manifest,
        plan=Plan(manifest, (), ()),
        stamp=Stamp("1.2.3+local.1", "abc", False, 315532800),
        options=options or ReleaseOptions(),
        env={},
        builders={},
        registry_for=Registry,
        index=None,
    )


@dataclass
class FakeStage:
    """Records its calls; can skip with a reason or fail with an error."""

    name: str
    calls: list[str]
    skip_reason: str | None = None
    error: Exception | None = None
    seen: list[ReleaseContext] = field(default_factory=list)

    def skip(self, ctx: ReleaseContext) -> str | None:
        return self.skip_reason

    def run(self, ctx: ReleaseContext) -> None:
        self.calls.append(self.name)
        self.seen.append(ctx)
        if self.error is not None:
            raise self.error


def test_pipeline_is_the_six_stages_in_order() -> None:
    names = [stage.name for stage in PIPELINE]
    assert names == ["preflight", "build", "validate", "stage", "publish", "verify"]


def test_stages_run_in_order_and_a_skip_is_an_outcome(tmp_path: Path) -> None:
    calls: list[str] = []
    stages = [
        FakeStage("a", calls),
        FakeStage("b", calls, skip_reason="not today"),
        FakeStage("c", calls),
    ]
    ctx = make_context(tmp_path)
    seen: list[str] = []
    results = run_pipeline(ctx, stages, lambda r: seen.append(r.name))
    assert calls == ["a", "c"]
    assert [(r.name, r.status, r.reason) for r in results] == [
        ("a", "ran", ""),
        ("b", "skipped", "not today"),
        ("c", "ran", ""),
    ]
    assert seen == ["a", "b", "c"]
    assert all(r.duration >= 0 for r in results)
    assert stages[0].seen == [ctx]


def test_first_failure_stops_the_pipeline_and_keeps_its_type(tmp_path: Path) -> None:
    calls: list[str] = []
    stages = [
        FakeStage("preflight", calls, error=UsageError("bad version")),
        FakeStage("build", calls),
    ]
    ctx = make_context(tmp_path)
    with pytest.raises(UsageError, match="bad version") as caught:
        run_pipeline(ctx, stages)
    assert caught.value.exit_code == 2
    assert calls == ["preflight"]
    assert [(r.name, r.status) for r in ctx.results] == [
        ("preflight", "failed"),
        ("build", "skipped"),
    ]
    assert ctx.results[0].reason == "bad version"
    assert ctx.results[1].reason == "preflight failed"


def test_a_failure_mid_pipeline_records_what_ran(tmp_path: Path) -> None:
    calls: list[str] = []
    stages = [
        FakeStage("a", calls),
        FakeStage("b", calls, error=BuildError("x", "boom")),
        FakeStage("c", calls),
    ]
    ctx = make_context(tmp_path)
    with pytest.raises(BuildError):
        run_pipeline(ctx, stages)
    assert [r.status for r in ctx.results] == ["ran", "failed", "skipped"]


def test_snapshot_skips_publish_and_verify_with_reasons(tmp_path: Path) -> None:
    ctx = make_context(tmp_path, ReleaseOptions(snapshot=True))
    reasons = {stage.name: stage.skip(ctx) for stage in PIPELINE}
    assert reasons["preflight"] is None
    assert reasons["build"] is None
    assert reasons["publish"] == "snapshot: nothing is published"
    assert reasons["verify"] == "snapshot: nothing was published"


def test_dry_run_stages_beside_the_release_and_skips_verify(tmp_path: Path) -> None:
    ctx = make_context(tmp_path, ReleaseOptions(dry_run=True))
    assert ctx.release_dir == tmp_path / "dist" / "release" / "1.2.3+local.1.dry-run"
    assert {s.name: s.skip(ctx) for s in PIPELINE}["verify"] == "dry run: nothing was published"


def test_resuming_skips_build_validate_and_stage(tmp_path: Path) -> None:
    ctx = make_context(tmp_path)
    ctx.resuming = True
    skipped = [s.name for s in PIPELINE if s.skip(ctx) is not None]
    assert skipped == ["build", "validate", "stage"]


def test_image_tags_replace_plus_and_put_the_version_first(tmp_path: Path) -> None:
    ctx = make_context(tmp_path)
    image = Image(hubs=("h/x",), tags=("latest", "1.2.3-local.1"))
    binary = Binary("a", tmp_path, "a:main", ("image",), ("linux/amd64",), ("linux",), image, ())
    assert ctx.image_tags(binary) == ("1.2.3-local.1", "latest")


def test_the_build_stage_builds_as_shipyard_build_does(tmp_path: Path) -> None:
    """One build path (issue 27): each action gets its own stamp, its clock from the last
    commit that changed its inputs, and the release's version for all."""
    import os
    import subprocess

    from shipyard.engine.context import BuildContext
    from shipyard.engine.keys import ActionKey, Inputs
    from shipyard.engine.plan import Action
    from shipyard.release.building import Build
    from shipyard.release.pipeline import prepare_release

    root = tmp_path / "repo"
    for name in ("a", "b"):
        (root / name / "src" / name).mkdir(parents=True)
        (root / name / "src" / name / "__init__.py").write_text("def main():\n    return 0\n")
        (root / name / "pyproject.toml").write_text(
            f'[project]\nname = "{name}"\nversion = "0.1"\n'
            '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        )
    (root / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: demo}\nbinaries:\n"
        "  a: {source: a, entrypoint: 'a:main'}\n  b: {source: b, entrypoint: 'b:main'}\n"
    )

    def commit(paths: list[str], when: int) -> None:
        date = f"@{when} +0000"
        env = {**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
        git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
        subprocess.run([*git, "add", *paths], check=True, env=env)
        subprocess.run([*git, "commit", "-qm", "x"], check=True, env=env)

    subprocess.run(["git", "init", "-q", str(root)], check=True)
    commit(["a", "binaries.yaml"], 1_600_000_000)
    commit(["b"], 1_700_000_000)
    seen: dict[str, tuple[str, int]] = {}

    class Recorder:
        kind = "wheel"

        def inputs(self, action: Action, ctx: BuildContext, deps: tuple[object, ...]) -> Inputs:
            return {"action": action.id}

        def build(
            self, action: Action, ctx: BuildContext, deps: tuple[object, ...], key: ActionKey
        ) -> tuple[()]:
            seen[action.id] = (ctx.stamp.version, ctx.stamp.epoch)
            return ()

    ctx = prepare_release(
        root / "binaries.yaml",
        ReleaseOptions(version="2.0.0"),
        env={**os.environ, "SHIPYARD_CACHE_DIR": str(tmp_path / "cache")},
        builders={"wheel": Recorder()},
    )
    Build().run(ctx)
    assert seen == {"wheel:a": ("2.0.0", 1_600_000_000), "wheel:b": ("2.0.0", 1_700_000_000)}
