"""Sharded builds on separate machines sharing a cache, then a merge: through each
protocol's server (`_shared_caches.STARTERS`: a registry of the test's own, BuildGrid
over the Remote Execution API, nginx WebDAV over the HTTP cache protocol)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from shipyard.stamp import read_stamp
from tests.integration._repo import clone, copy_worktree, shipyard
from tests.integration._shared_caches import CacheServer, cache_server

__all__ = ["cache_server"]  # the fixture the tests take, imported for pytest to find

pytestmark = pytest.mark.integration


def _wheels(root: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((root / "dist" / "wheels").glob("*.whl"))
    }


def _statuses(root: Path) -> dict[str, str]:
    report = json.loads((root / "dist" / "report.json").read_text())
    return {a["id"]: a["status"] for a in report["actions"]}


def test_two_shards_then_a_merge_that_builds_nothing(
    tmp_path: Path, cache_server: CacheServer
) -> None:
    origin = copy_worktree(tmp_path / "origin")
    remote = f"--cache={cache_server.url}"
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
    shared = json.loads((merge / "dist" / "report.json").read_text())["cache"]["remote"]
    assert shared["hits"] == len(statuses) and shared["misses"] == 0, shared
    assert shared["bytes_down"] > 0 and shared["disabled"] is None


def test_bad_cache_url_and_shard_are_usage_errors(tmp_path: Path) -> None:
    root = copy_worktree(tmp_path / "repo")
    bad_url = shipyard(root, "build", "--cache=ftp://x/y")
    assert bad_url.returncode == 2 and "oci://HOST" in bad_url.stderr
    bad_shard = shipyard(root, "build", "--shard=3/2")
    assert bad_shard.returncode == 2 and "1 <= I <= N" in bad_shard.stderr


def test_a_release_restores_what_a_build_put_in_the_shared_cache(
    tmp_path: Path, cache_server: CacheServer
) -> None:
    """One build path (issue 27): a release takes --cache as `shipyard build` does.
    After a build on one machine fills the shared cache, a snapshot release of the same
    commit on another machine, with an empty local cache, rebuilds nothing; a release
    with --cache-mode=read-only writes nothing."""
    origin = copy_worktree(tmp_path / "origin")
    remote = f"--cache={cache_server.url}"
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
    held = cache_server.entries()
    released = shipyard(
        releaser,
        "release",
        "--snapshot",
        *selection,
        remote,
        "--cache-mode=read-only",
        f"--cache-dir={tmp_path / 'b'}",
    )
    assert released.returncode == 0, released.stderr
    statuses = _statuses(releaser)
    assert statuses and set(statuses.values()) == {"cached"}, statuses
    assert set(statuses) == set(_statuses(builder))
    assert _wheels(releaser) == _wheels(builder)
    assert cache_server.entries() == held
    assert "(read-only): " in released.stderr, "the summary line of the release's build"
