"""Issue 18, item 8: `cache prune` covers every part of the cache folder (action entries
and blobs, the oci/ base blob store, validated manifests), prunes by least recent use,
keeps what another build holds, and a build keeps the cache under its limit on its
own, but never looks after a build that stored nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from shipyard.cli import main
from shipyard.engine.cache.local import ActionCache, blob_store
from shipyard.engine.cache.prune import prune_to
from shipyard.errors import UsageError
from tests.unit.engine.cache._filled import HEX, Filled, blob, files, sha


@pytest.mark.parametrize("removed", range(6))
@pytest.mark.parametrize("slack", ["exact", "one byte short of the next"])
def test_prune_removes_least_recently_used_first_across_every_part(
    tmp_path: Path, removed: int, slack: str
) -> None:
    filled = Filled(tmp_path / "cache")
    kept = sum(filled.sizes[removed:])
    limit = kept
    if slack != "exact" and removed:
        limit += filled.sizes[removed - 1] - 1
    before = files(tmp_path / "cache")
    gone = {str(p.relative_to(tmp_path / "cache")) for _, ps in filled.units[:removed] for p in ps}

    result = filled.cache.prune(limit)

    assert files(tmp_path / "cache") == before - gone, [u for u, _ in filled.units[:removed]]
    assert filled.zipapps.exists(), "not the build cache: never pruned"
    assert result.kept_bytes == kept == filled.cache.size() <= limit
    assert result.removed_bytes == sum(filled.sizes[:removed])
    assert result.removed_entries == sum(1 for u, _ in filled.units[:removed] if u[0] == "E")
    assert not result.shared


def test_a_blob_an_entry_that_stays_names_is_kept(tmp_path: Path) -> None:
    filled = Filled(tmp_path / "cache")
    shared = filled.cache.blobs / sha(filled.cache, "shared.whl")
    filled.cache.prune(filled.cache.size() - 40_000 - 1)  # A, then E1
    assert not filled.e1.exists() and filled.e2.exists()
    assert shared.exists(), "E2 still names it"


def test_prune_without_max_size_uses_the_limit_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    filled = Filled(tmp_path / "cache")
    # 51,200 bytes: M and E2 fit (22 KB), B too would not (52 KB)
    monkeypatch.setenv("SHIPYARD_CACHE_MAX_SIZE", "50K")
    assert main(["cache", "prune", f"--cache-dir={tmp_path / 'cache'}"]) == 0
    assert "removed 1 entries and 3 other files" in capsys.readouterr().out  # A, B, E1's blob
    assert list((tmp_path / "cache" / "oci" / "sha256").iterdir()) == []
    assert filled.e2.exists() and filled.m.exists() and not filled.e1.exists()
    monkeypatch.setenv("SHIPYARD_CACHE_MAX_SIZE", "off")
    assert main(["cache", "prune", f"--cache-dir={tmp_path / 'cache'}"]) == 2
    assert "--max-size" in capsys.readouterr().err
    assert main(["cache", "prune", f"--cache-dir={tmp_path / 'cache'}", "--max-size=0"]) == 0
    assert not filled.e2.exists() and not filled.m.exists() and filled.zipapps.exists()


def test_prune_to_takes_max_size_else_the_limit_and_says_when_there_is_none(
    tmp_path: Path,
) -> None:
    filled = Filled(tmp_path / "cache")
    pruned, limit = prune_to(tmp_path / "cache", {"SHIPYARD_CACHE_MAX_SIZE": "off"}, "0")
    assert limit == 0 and pruned.kept_bytes == 0 and not filled.e2.exists()
    with pytest.raises(UsageError, match="turns the automatic prune off"):
        prune_to(tmp_path / "cache", {"SHIPYARD_CACHE_MAX_SIZE": "off"})
    with pytest.raises(UsageError, match="--max-size=lots: give bytes"):
        prune_to(tmp_path / "cache", {}, "lots")
    assert prune_to(tmp_path / "cache", {"SHIPYARD_CACHE_MAX_SIZE": "1K"})[1] == 1024


@contextmanager
def _held_elsewhere(code: str) -> Iterator[None]:
    """Run `code` in another process (holding the cache), until the block ends."""
    child = subprocess.Popen(
        [sys.executable, "-c", f"{code}\nprint('ready', flush=True)\ninput()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        yield
    finally:
        assert child.stdin is not None
        child.stdin.write("\n")
        child.stdin.close()
        child.wait(timeout=30)


def test_what_another_build_may_hold_is_kept_until_it_ends(tmp_path: Path) -> None:
    """While another process holds the cache (a build, or any user of the base blob
    store), base blobs and blobs no entry names yet (one being stored) are kept;
    entries and manifests, whose readers take a vanished file as a miss, go."""
    filled = Filled(tmp_path / "cache")
    orphan = blob(filled.cache.blobs, "d" * 64, 1_000, 5)  # a store on its way in
    holders = [
        # A build: its ActionCache holds the lock from its first lookup.
        "from pathlib import Path\nfrom shipyard.engine.cache.local import ActionCache\n"
        f"cache = ActionCache(Path({str(tmp_path / 'cache')!r}))\ncache.open()",
        # `build --no-cache` with an image: only the base blob store.
        "from shipyard.engine.cache.local import blob_store\n"
        f"blob_store({{'SHIPYARD_CACHE_DIR': {str(tmp_path / 'cache')!r}}})",
    ]
    for number, code in enumerate(holders):
        with _held_elsewhere(code):
            result = filled.cache.prune(0)
        assert result.shared, number
        assert filled.a.exists() and filled.b.exists() and orphan.exists(), number
        assert not filled.e1.exists() and not filled.e2.exists() and not filled.m.exists()
        assert list(filled.cache.blobs.iterdir()) == [orphan], "only the unnamed blob stays"
    result = filled.cache.prune(0)
    assert not result.shared
    assert files(tmp_path / "cache") == {"zipapps/build/native.so"}


def test_the_build_process_own_hold_does_not_count_as_another(tmp_path: Path) -> None:
    filled = Filled(tmp_path / "cache")
    blob_store({"SHIPYARD_CACHE_DIR": str(tmp_path / "cache")})  # this process joins
    filled.cache.open()
    assert not filled.cache.prune(0).shared
    assert not filled.a.exists()


# End to end: `shipyard build` prunes after a build that stored something.

MANIFEST = """\
schema: 1
project: {name: demo, version: "1.0.0", python: "3.11"}
binaries:
  app:
    source: app
    entrypoint: "app:main"
    outputs: [wheel]
"""


def _repo(folder: Path) -> Path:
    (folder / "app" / "app").mkdir(parents=True)
    (folder / "app" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        '[project]\nname = "app"\nversion = "1.0.0"\n'
    )
    (folder / "app" / "app" / "__init__.py").write_text("def main() -> None:\n    pass\n")
    (folder / "binaries.yaml").write_text(MANIFEST)
    (folder / ".gitignore").write_text("/dist/\n")
    git = ["git", "-C", str(folder), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    return folder


def _build(repo: Path, cache: Path, limit: str | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CI": "1"}
    env.pop("SHIPYARD_CACHE_MAX_SIZE", None)
    if limit is not None:
        env["SHIPYARD_CACHE_MAX_SIZE"] = limit
    done = subprocess.run(
        [sys.executable, "-m", "shipyard", "build", f"--cache-dir={cache}"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    return done


def test_a_build_over_the_limit_prunes_and_one_under_it_or_a_no_op_does_not(
    tmp_path: Path,
) -> None:
    repo = _repo(tmp_path / "repo")
    cache = tmp_path / "cache"
    oci = cache / "oci" / "sha256"
    old = blob(oci, HEX[0], 300_000, 24)  # what earlier builds left: 300 KB
    record = cache / "v1" / "autoprune.json"

    # Under the limit: nothing is removed, and the look is recorded.
    done = _build(repo, cache, "1M")
    assert done.returncode == 0, done.stderr
    assert old.exists()
    looked = json.loads(record.read_text())
    assert looked["limit"] == 1 << 20 and looked["removed_bytes"] is None
    assert looked["size"] > 300_000

    # A no-op build stores nothing: it does not even look, whatever the limit.
    stamp = record.stat().st_mtime_ns
    time.sleep(0.01)
    done = _build(repo, cache, "100K")
    assert done.returncode == 0, done.stderr
    assert "cached  wheel:app" in done.stderr
    assert record.stat().st_mtime_ns == stamp and old.exists(), "a no-op build pruned"

    # A build that stores something, over the limit: the least recently used goes.
    (repo / "app" / "app" / "__init__.py").write_text("def main() -> None:\n    return\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "commit", "-qam", "y"], check=True)
    done = _build(repo, cache, "100K")
    assert done.returncode == 0, done.stderr
    assert not old.exists(), "the 300 KB base blob, least recently used, is gone"
    looked = json.loads(record.read_text())
    assert looked["removed_bytes"] >= 300_000 and looked["limit"] == 100 << 10
    assert ActionCache(cache).size() <= 100 << 10
    assert len(list((cache / "v1" / "actions").glob("*.json"))) == 2, "both builds' entries stay"


def test_a_bad_limit_stops_the_build_before_it_starts(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    done = _build(repo, tmp_path / "cache", "ten gigs")
    assert done.returncode == 2
    assert "SHIPYARD_CACHE_MAX_SIZE=ten gigs: give bytes or a size like 500M or 10G" in done.stderr
    assert not (repo / "dist" / "wheels").exists()
