"""The action cache: hits restore outputs without running, misses build and store."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from shipyard._fs import TEMP_PREFIX, remove_stale_temps, sha256_file
from shipyard.engine.cache import local as cache_module
from shipyard.engine.cache.local import ActionCache, default_cache_dir
from shipyard.engine.keys import ActionKey, Inputs
from shipyard.engine.plan import Action
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import Artifact, BuildContext
from shipyard.stamp import Stamp


class Counting:
    """Writes one output whose bytes depend on the key; counts real builds."""

    kind = "wheel"

    def __init__(self) -> None:
        self.builds = 0
        self.salt = "a"

    def inputs(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Inputs:
        return {"salt": self.salt}

    def build(
        self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], key: ActionKey
    ) -> tuple[Artifact, ...]:
        self.builds += 1
        out = ctx.dist / "wheels" / "x.whl"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(f"content {self.salt}")
        return (_wheel(out),)


def _wheel(path: Path, size: int = 9) -> Artifact:
    return Artifact("wheel", "", "py3-none-any", path, sha256_file(path), size)


def _setup(tmp_path: Path) -> tuple[BuildContext, Action, ActionCache]:
    ctx = BuildContext(tmp_path, tmp_path / "dist", Stamp("1", None, False, 0), "3.11", {})
    action = Action("wheel:x", "wheel", ("x",), tmp_path)
    return ctx, action, ActionCache(tmp_path / "cache")


def test_hit_restores_without_building(tmp_path: Path) -> None:
    ctx, action, cache = _setup(tmp_path)
    inner = Counting()
    builder = wrapped(inner, cache)
    first = builder.run(action, ctx, ())
    assert not first.cached and inner.builds == 1
    (ctx.dist / "wheels" / "x.whl").unlink()
    second = builder.run(action, ctx, ())
    assert second.cached and inner.builds == 1
    assert (ctx.dist / "wheels" / "x.whl").read_text() == "content a"
    assert second.outputs[0].sha256 == first.outputs[0].sha256


def test_changed_input_misses_and_force_rebuilds(tmp_path: Path) -> None:
    ctx, action, cache = _setup(tmp_path)
    inner = Counting()
    wrapped(inner, cache).run(action, ctx, ())
    inner.salt = "b"
    assert not wrapped(inner, cache).run(action, ctx, ()).cached
    assert not wrapped(inner, cache, force=True).run(action, ctx, ()).cached
    assert inner.builds == 3


def test_damaged_entry_is_a_miss_not_an_error(tmp_path: Path) -> None:
    ctx, action, cache = _setup(tmp_path)
    inner = Counting()
    wrapped(inner, cache).run(action, ctx, ())
    key = wrapped(inner, cache).key(action, ctx, ()).digest
    for blob in cache.blobs.iterdir():
        blob.unlink()
    assert cache.restore(key, tmp_path) is None
    (cache.actions / f"{key}.json").write_text("{not json")
    assert cache.restore(key, tmp_path) is None


def test_prune_drops_least_recently_used_first(tmp_path: Path) -> None:
    cache = ActionCache(tmp_path / "cache")
    for name in ("old", "new"):
        out = tmp_path / f"{name}.bin"
        out.write_bytes(os.urandom(10_000))
        cache.store(name, (_wheel(out, 10_000),), tmp_path)
        past = time.time() - (100 if name == "old" else 0)
        os.utime(cache.actions / f"{name}.json", (past, past))
    result = cache.prune(15_000)
    assert result.removed_entries == 1
    assert not (cache.actions / "old.json").exists() and (cache.actions / "new.json").exists()
    assert len(list(cache.blobs.iterdir())) == 1
    assert result.kept_bytes <= 15_000


def test_cache_dir_precedence(tmp_path: Path) -> None:
    assert default_cache_dir(str(tmp_path / "a"), {"SHIPYARD_CACHE_DIR": "/b"}) == tmp_path / "a"
    assert default_cache_dir(None, {"SHIPYARD_CACHE_DIR": str(tmp_path)}) == tmp_path
    assert default_cache_dir(None, {}).name == "shipyard"


def test_stale_temporaries_are_swept(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / f"{TEMP_PREFIX}x.whl.123").write_text("partial")
    (tmp_path / f"{TEMP_PREFIX}wheel-abc" / "out").mkdir(parents=True)
    (tmp_path / "wheels" / "kept.whl").write_text("whole")
    assert remove_stale_temps(tmp_path) == 2
    assert [p.name for p in tmp_path.rglob("*")] == ["wheels", "kept.whl"]


def test_outputs_in_place_are_not_hashed_again_until_they_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx, action, cache = _setup(tmp_path)
    inner = Counting()
    wrapped(inner, cache).run(action, ctx, ())
    out = ctx.dist / "wheels" / "x.whl"
    hashed: list[Path] = []
    real = sha256_file

    def counting(path: Path) -> str:
        hashed.append(path)
        return real(path)

    monkeypatch.setattr(cache_module, "sha256_file", counting)
    fresh = ActionCache(tmp_path / "cache")  # a new process: the record is on disk
    for _ in range(3):
        assert wrapped(inner, fresh).run(action, ctx, ()).cached
    assert hashed == []  # the stat facts match what the build recorded
    out.write_text("content b")  # same size, other bytes: the stat facts change
    outcome = wrapped(inner, ActionCache(tmp_path / "cache")).run(action, ctx, ())
    assert outcome.cached and inner.builds == 1
    assert hashed == [out]
    assert out.read_text() == "content a"  # restored from the cache
    hashed.clear()
    assert wrapped(inner, ActionCache(tmp_path / "cache")).run(action, ctx, ()).cached
    assert hashed == []


def test_a_builder_may_refuse_what_the_cache_restores(tmp_path: Path) -> None:
    """`restored_ok` (a test stage checks its JUnit file): a refused entry is a miss."""
    ctx, action, cache = _setup(tmp_path)

    class Picky(Counting):
        accept = True

        def restored_ok(self, action: Action, ctx: BuildContext, restored: object) -> bool:
            return self.accept

    inner = Picky()
    wrapped(inner, cache).run(action, ctx, ())
    assert wrapped(inner, cache).run(action, ctx, ()).cached and inner.builds == 1
    inner.accept = False
    assert not wrapped(inner, cache).run(action, ctx, ()).cached and inner.builds == 2


def test_auto_prune_keeps_what_this_build_used_even_over_the_limit(tmp_path: Path) -> None:
    """The default limit is small (512M): a build's own entries stay however large, so
    the next build of the same commit is all hits; only older ones go."""
    earlier = ActionCache(tmp_path / "cache")
    out = tmp_path / "old.bin"
    out.write_bytes(os.urandom(10_000))
    earlier.store("old", (_wheel(out, 10_000),), tmp_path)
    os.utime(earlier.actions / "old.json", (time.time() - 100, time.time() - 100))
    earlier.close()
    build = ActionCache(tmp_path / "cache")
    out = tmp_path / "new.bin"
    out.write_bytes(os.urandom(10_000))
    build.store("new", (_wheel(out, 10_000),), tmp_path)
    pruned = build.auto_prune(5_000)
    assert pruned is not None and pruned.removed_entries == 1
    assert not (build.actions / "old.json").exists() and (build.actions / "new.json").exists()
    assert pruned.kept_bytes > 5_000, "over the limit: what this build stored stays"
    assert [p.name for p in build.blobs.iterdir()] == [sha256_file(out)], "and its blob"
