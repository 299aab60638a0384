"""Issue 18, item 8: `cache info` and `cache prune` cover every part of the cache folder
(action entries and blobs, the oci/ base blob store, validated manifests), prune by
least recent use, keep what another build holds, and a build keeps the cache under
its limit on its own, but never looks after a build that stored nothing."""

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

from shipyard._fs import sha256_file
from shipyard.artifacts import Artifact
from shipyard.cli import main
from shipyard.engine.cache.local import ActionCache, blob_store, cache_limit, parse_size
from shipyard.errors import UsageError
from shipyard.oci.archive import write_docker_archive
from shipyard.oci.base import load_base
from shipyard.oci.layer import Entry, write_layer
from shipyard.oci.model import Image, Platform, append_layer

HOUR = 3600.0
NOW = time.time()


def _aged(path: Path, hours_ago: float) -> Path:
    when = NOW - hours_ago * HOUR
    os.utime(path, (when, when))
    return path


def _blob(folder: Path, name: str, size: int, hours_ago: float) -> Path:
    """A base blob (or any file) of `size` random bytes, last used `hours_ago`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(os.urandom(size))
    return _aged(path, hours_ago)


def _entry(cache: ActionCache, key: str, outputs: dict[str, int], hours_ago: float) -> Path:
    """An action entry storing files named `outputs` (name -> size; the same name and
    size is the same blob), last used `hours_ago`."""
    made = []
    for name, size in outputs.items():
        out = cache.dir.parent / "outputs" / name
        out.parent.mkdir(parents=True, exist_ok=True)
        if not out.exists():
            out.write_bytes(os.urandom(size))
        made.append(Artifact("wheel", "", "any", out, sha256_file(out), size))
    cache.store(key, tuple(made), cache.dir.parent)
    return _aged(cache.actions / f"{key}.json", hours_ago)


def _sha(cache: ActionCache, name: str) -> str:
    return sha256_file(cache.dir.parent / "outputs" / name)


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != ".lock"}


def _size(paths: list[Path]) -> int:
    return sum(p.stat().st_size for p in paths)


HEX = ("a" * 64, "b" * 64, "c" * 64)


class Filled:
    """A cache with every part, each file's size and last use known:

    oldest first: base blob A (3 h), entry E1 (2.5 h; its own blob and one E2
    shares), base blob B (2 h), manifest M (1 h), entry E2 (0.5 h); and a
    zipapps/ folder, which is not the build cache.
    """

    def __init__(self, root: Path) -> None:
        self.cache = ActionCache(root)
        oci = root / "oci" / "sha256"
        self.a = _blob(oci, HEX[0], 40_000, 3)
        self.e1 = _entry(self.cache, "e1", {"own.whl": 20_000, "shared.whl": 10_000}, 2.5)
        self.b = _blob(oci, HEX[1], 30_000, 2)
        self.m = _blob(root / "manifests", "m.json", 5_000, 1)
        self.e2 = _entry(self.cache, "e2", {"shared.whl": 10_000, "new.whl": 7_000}, 0.5)
        self.zipapps = _blob(root / "zipapps" / "build", "native.so", 50_000, 10)
        blobs = self.cache.blobs
        own, shared, new = (
            blobs / _sha(self.cache, n) for n in ("own.whl", "shared.whl", "new.whl")
        )
        # What removing each unit frees, in LRU order: E1 frees its own blob only.
        self.units: list[tuple[str, list[Path]]] = [
            ("A", [self.a]),
            ("E1", [self.e1, own]),
            ("B", [self.b]),
            ("M", [self.m]),
            ("E2", [self.e2, shared, new]),
        ]
        self.sizes = [_size(paths) for _, paths in self.units]
        self.cache.close()  # the builds that filled it are over


def test_info_counts_every_part_and_the_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    filled = Filled(tmp_path / "cache")
    found = filled.cache.usage()
    parts = {p.folder: p for p in found.parts}
    assert set(parts) == {"v1", "oci", "manifests", "metadata", "sdist-wheels", "zipapps"}
    assert parts["metadata"].pruned and dict(parts["metadata"].counts) == {"entries": 0}
    assert parts["sdist-wheels"].pruned and dict(parts["sdist-wheels"].counts) == {"wheels": 0}
    v1 = [p for p in (tmp_path / "cache" / "v1").rglob("*") if p.is_file()]
    assert parts["v1"].size == _size(v1)
    assert dict(parts["v1"].counts) == {"entries": 2, "blobs": 3}
    assert parts["oci"].size == 70_000 and dict(parts["oci"].counts) == {"blobs": 2, "notes": 0}
    assert parts["manifests"].size == 5_000
    assert parts["zipapps"].size == 50_000 and not parts["zipapps"].pruned
    assert found.managed == _size(v1) + 75_000 == filled.cache.size()
    assert found.total == found.managed + 50_000

    assert main(["cache", "info", f"--cache-dir={tmp_path / 'cache'}"]) == 0
    out = capsys.readouterr().out
    assert f"({found.managed} bytes) stored by builds" in out
    assert "oci/        base image blobs: 2 blobs, 0 notes, 68.4 KB (70000 bytes)" in out
    assert "manifests/  validated manifests: 1 entries, 4.9 KB (5000 bytes)" in out
    assert "zipapps/    not shipyard's build cache, not pruned" in out


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
    before = _files(tmp_path / "cache")
    gone = {str(p.relative_to(tmp_path / "cache")) for _, ps in filled.units[:removed] for p in ps}

    result = filled.cache.prune(limit)

    assert _files(tmp_path / "cache") == before - gone, [u for u, _ in filled.units[:removed]]
    assert filled.zipapps.exists(), "not the build cache: never pruned"
    assert result.kept_bytes == kept == filled.cache.size() <= limit
    assert result.removed_bytes == sum(filled.sizes[:removed])
    assert result.removed_entries == sum(1 for u, _ in filled.units[:removed] if u[0] == "E")
    assert not result.shared


def test_a_blob_an_entry_that_stays_names_is_kept(tmp_path: Path) -> None:
    filled = Filled(tmp_path / "cache")
    shared = filled.cache.blobs / _sha(filled.cache, "shared.whl")
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


def test_sizes_and_the_default_limit() -> None:
    assert parse_size("1M", "--max-size") == 1 << 20
    assert parse_size("10g", "--max-size") == 10 << 30
    assert parse_size("512", "--max-size") == 512
    assert cache_limit({}) == 10 << 30
    assert cache_limit({"SHIPYARD_CACHE_MAX_SIZE": "2G"}) == 2 << 30
    assert cache_limit({"SHIPYARD_CACHE_MAX_SIZE": "off"}) is None
    with pytest.raises(UsageError, match=r"SHIPYARD_CACHE_MAX_SIZE=lots: give bytes"):
        cache_limit({"SHIPYARD_CACHE_MAX_SIZE": "lots"})


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
    orphan = _blob(filled.cache.blobs, "d" * 64, 1_000, 5)  # a store on its way in
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
    assert _files(tmp_path / "cache") == {"zipapps/build/native.so"}


def test_the_build_process_own_hold_does_not_count_as_another(tmp_path: Path) -> None:
    filled = Filled(tmp_path / "cache")
    blob_store({"SHIPYARD_CACHE_DIR": str(tmp_path / "cache")})  # this process joins
    filled.cache.open()
    assert not filled.cache.prune(0).shared
    assert not filled.a.exists()


def test_base_blobs_are_marked_used_when_a_build_uses_them(tmp_path: Path) -> None:
    store = blob_store({"SHIPYARD_CACHE_DIR": str(tmp_path / "cache")})
    layer = write_layer([Entry("etc/arch", data=b"amd64")], store, 1704067200)
    image = append_layer(Image(Platform.parse("linux/amd64")), layer)
    write_docker_archive(tmp_path / "base.tar", image, ["b:1"], 1704067200)
    first = load_base("docker-archive:base.tar", ["linux/amd64"], root=tmp_path, store=store)
    blobs = [x.path for x in first["linux/amd64"].image.layers]
    assert blobs and all(p.is_relative_to(store.root) for p in blobs)
    for blob in blobs:
        _aged(blob, 48)
    load_base("docker-archive:base.tar", ["linux/amd64"], root=tmp_path, store=store)
    assert all(p.stat().st_mtime > time.time() - 60 for p in blobs), "used: pruned last"


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
    old = _blob(oci, HEX[0], 300_000, 24)  # what earlier builds left: 300 KB
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
