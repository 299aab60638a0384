"""The one build entry (issue 27, item 3): its flag checks, and that `shipyard build` and a
release's Build stage ask it for the same build."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shipyard.engine import build as engine_build
from shipyard.engine.build import BuildRequest, check_jobs, check_remote, parse_shard
from shipyard.engine.plan import Plan
from shipyard.errors import UsageError
from shipyard.release import building
from shipyard.release.context import ReleaseOptions
from shipyard.stamp import Stamp
from tests.unit.release.test_pipeline import make_context

MANIFEST = """\
schema: 1
project: {name: demo, version: "1.0"}
binaries:
  app: {source: app, entrypoint: "app:main", host: [linux]}
"""


def test_bad_jobs_shard_and_cache_urls_are_usage_errors() -> None:
    check_jobs(None)
    check_jobs(1)
    with pytest.raises(UsageError, match="-j 0: give at least 1"):
        check_jobs(0)
    assert parse_shard("2/3") == (2, 3)
    with pytest.raises(UsageError, match="--shard=x/2: write I/N"):
        parse_shard("x/2")
    check_remote(None)
    check_remote("oci://127.0.0.1:5000/cache")
    check_remote("http://x/y")
    with pytest.raises(UsageError, match="oci://HOST"):
        check_remote("ftp://x/y")
    with pytest.raises(UsageError, match="--shard=1: write I/N"):
        BuildRequest(shard="1").check()
    with pytest.raises(UsageError, match="--cache-mode=pull: write read-write"):
        BuildRequest(cache_mode="pull").check()
    with pytest.raises(UsageError, match="SHIPYARD_CACHE_MODE=pr: write read-write"):
        BuildRequest(env={"SHIPYARD_CACHE_MODE": "pr"}).check()


def test_a_request_runs_with_the_options_it_names() -> None:
    request = BuildRequest(
        jobs=3, keep_going=True, cache_dir=Path("/c"), force=True, remote="oci://h/r"
    )
    options = request.options()
    assert (options.jobs, options.keep_going, options.cache_dir) == (3, True, Path("/c"))
    assert (options.force, options.remote) == (True, "oci://h/r")
    assert options.cache_mode == "read-write"
    assert BuildRequest(cache_mode="read-only").options().cache_mode == "read-only"
    from_env = BuildRequest(env={"SHIPYARD_CACHE_MODE": "write-only"}).options()
    assert from_env.cache_mode == "write-only"


def _record(monkeypatch: pytest.MonkeyPatch) -> list[tuple[BuildRequest, Stamp | None]]:
    """Replace the one entry with a recorder, wherever it is called from."""
    asked: list[tuple[BuildRequest, Stamp | None]] = []

    def fake(plan: Plan, request: BuildRequest, builders: object, **kw: object) -> object:
        stamp = kw.get("stamp")
        asked.append((request, stamp if isinstance(stamp, Stamp) else None))
        raise KeyboardInterrupt  # stop here: nothing is built

    monkeypatch.setattr(engine_build, "build", fake)
    monkeypatch.setattr(building, "build", fake)
    return asked


def test_shipyard_build_and_the_release_build_stage_ask_the_one_entry_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One build path: a release with --version, -j, --cache-dir and --cache asks the
    engine for what `shipyard build` with the same flags asks for."""
    from shipyard.cli import main

    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "pyproject.toml").write_text("[project]\nname = 'app'\n")
    (tmp_path / "binaries.yaml").write_text(MANIFEST)
    monkeypatch.chdir(tmp_path)
    asked = _record(monkeypatch)
    cache, remote = tmp_path / "cache", "oci://127.0.0.1:5000/cache"
    flags = ["--version=2.0.0", "-j", "2", f"--cache-dir={cache}", f"--cache={remote}"]
    assert main(["build", *flags, "--cache-mode=read-only"]) == 130
    options = ReleaseOptions(
        version="2.0.0", jobs=2, cache_dir=cache, remote=remote, cache_mode="read-only"
    )
    ctx = make_context(tmp_path, options)
    ctx.stamp = Stamp("2.0.0", "abc", False, 315532800)  # as preflight leaves it
    with pytest.raises(KeyboardInterrupt):
        building.Build().run(ctx)
    (cli, cli_stamp), (release, release_stamp) = asked
    assert cli_stamp is None  # `shipyard build` has the entry read the stamp
    assert release_stamp is ctx.stamp  # the release read it once, at its edge
    assert cli.env is os.environ and release.env is ctx.env
    assert {**vars(cli), "env": None} == {**vars(release), "env": None}
    assert (cli.jobs, cli.cache_dir, cli.remote) == (2, cache, remote)
    assert cli.cache_mode == "read-only"
