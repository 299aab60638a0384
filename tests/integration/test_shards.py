"""Sharded builds on separate machines sharing a registry-backed cache, then a merge."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import pytest

from shipyard.stamp import read_stamp
from tests.integration._repo import clone, copy_worktree, shipyard
from tests.integration.conftest import Services

pytestmark = [pytest.mark.integration, pytest.mark.requires("registry")]


def _wheels(root: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((root / "dist" / "wheels").glob("*.whl"))
    }


def _statuses(root: Path) -> dict[str, str]:
    report = json.loads((root / "dist" / "report.json").read_text())
    return {a["id"]: a["status"] for a in report["actions"]}


def test_two_shards_then_a_merge_that_builds_nothing(tmp_path: Path, services: Services) -> None:
    origin = copy_worktree(tmp_path / "origin")
    remote = f"--cache=oci://{services.registry}/shipyard-cache/{uuid.uuid4().hex[:12]}"
    single = clone(origin, tmp_path / "single")
    selection = ("--target=standard", "--output=wheel,zipapp")
    done = shipyard(single, "build", *selection, f"--cache-dir={tmp_path / 'single-cache'}")
    assert done.returncode == 0, done.stderr
    shards: dict[str, str] = {}
    for i in (1, 2):
        machine = clone(origin, tmp_path / f"shard{i}")
        run = shipyard(
            machine,
            "build",
            *selection,
            f"--shard={i}/2",
            remote,
            f"--cache-dir={tmp_path / f'cache{i}'}",
        )
        assert run.returncode == 0, run.stderr
        shards.update({a: s for a, s in _statuses(machine).items() if s == "built"})
    merge = clone(origin, tmp_path / "merge")
    final = shipyard(merge, "build", *selection, remote, f"--cache-dir={tmp_path / 'empty-cache'}")
    assert final.returncode == 0, final.stderr
    statuses = _statuses(merge)
    assert set(statuses.values()) == {"cached"}, statuses
    assert set(shards) == set(statuses), "every action was built by some shard"
    assert _wheels(merge) == _wheels(single)


def test_bad_cache_url_and_shard_are_usage_errors(tmp_path: Path) -> None:
    root = copy_worktree(tmp_path / "repo")
    bad_url = shipyard(root, "build", "--cache=ftp://x/y")
    assert bad_url.returncode == 2 and "oci://HOST" in bad_url.stderr
    bad_shard = shipyard(root, "build", "--shard=3/2")
    assert bad_shard.returncode == 2 and "1 <= I <= N" in bad_shard.stderr


def test_a_release_restores_what_a_build_put_in_the_registry_cache(
    tmp_path: Path, services: Services
) -> None:
    """One build path (issue 27): a release takes --cache=oci:// as `shipyard build` does.
    After a build on one machine fills the registry cache, a snapshot release of the same
    commit on another machine, with an empty local cache, rebuilds nothing."""
    origin = copy_worktree(tmp_path / "origin")
    remote = f"--cache=oci://{services.registry}/shipyard-cache/{uuid.uuid4().hex[:12]}"
    selection = ("--binary=echo,mesh-cni",)  # no image: nothing else to validate
    # The version a snapshot of this commit takes: the build stamps the same one.
    version = read_stamp(origin, "git", {}, snapshot=True).version
    builder = clone(origin, tmp_path / "builder")
    built = shipyard(
        builder,
        "build",
        *selection,
        f"--version={version}",
        remote,
        f"--cache-dir={tmp_path / 'a'}",
    )
    assert built.returncode == 0, built.stderr
    assert "built" in set(_statuses(builder).values())
    releaser = clone(origin, tmp_path / "releaser")
    released = shipyard(
        releaser, "release", "--snapshot", *selection, remote, f"--cache-dir={tmp_path / 'b'}"
    )
    assert released.returncode == 0, released.stderr
    statuses = _statuses(releaser)
    assert statuses and set(statuses.values()) == {"cached"}, statuses
    assert set(statuses) == set(_statuses(builder))
    assert _wheels(releaser) == _wheels(builder)
