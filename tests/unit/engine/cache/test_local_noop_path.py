"""A no-op build's shortcuts stay correct: the stat memo of source digests, and the
"already in place" path of a cache hit that reads neither the entry nor its blobs."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from shipyard.engine.cache.local import ActionCache
from shipyard.engine.run import wrapped
from shipyard.errors import UsageError
from shipyard.files.sources import GitIgnored, tree_hash
from shipyard.files.statcache import StatMemo
from tests.unit.engine.cache.test_local import Counting, _setup

SETTLE = 1_000_000  # 1 ms: the tests wait that long instead of the build's 2 s


def _settled() -> None:
    time.sleep(0.01)


def _tree(root: Path) -> Path:
    source = root / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "a.py").write_text("A = 1\n")
    (source / "pkg" / "b.py").write_text("B = 2\n")
    return source


def test_the_memo_skips_reading_unchanged_files_and_sees_every_change(tmp_path: Path) -> None:
    source = _tree(tmp_path)
    _settled()
    memo = StatMemo(tmp_path / "memo.json", settle_ns=SETTLE)
    plain = tree_hash(source)
    assert tree_hash(source, memo=memo) == plain
    memo.save()
    assert len(json.loads((tmp_path / "memo.json").read_text())) == 2

    # A memo whose digest is a lie is believed while the stat facts hold: proof
    # that the file is not read again ...
    fake = StatMemo(tmp_path / "memo.json", settle_ns=SETTLE)
    data = json.loads((tmp_path / "memo.json").read_text())
    for entry in data.values():
        entry[4] = "00" * 32
    (tmp_path / "memo.json").write_text(json.dumps(data))
    assert tree_hash(source, memo=fake) != plain
    # ... and any write to the file changes its facts, so the lie stops counting.
    (source / "pkg" / "a.py").write_text("A = 1\n")
    (source / "pkg" / "b.py").write_text("B = 3\n")
    fresh = StatMemo(tmp_path / "memo.json", settle_ns=SETTLE)
    assert tree_hash(source, memo=fresh) == tree_hash(source)


def test_a_file_younger_than_the_settle_time_is_never_remembered(tmp_path: Path) -> None:
    """git's racily-clean case: a rewrite of the same size within the clock's tick
    keeps the stat facts, so only files old enough are recorded."""
    source = _tree(tmp_path)
    memo = StatMemo(tmp_path / "memo.json", settle_ns=2_000_000_000)
    tree_hash(source, memo=memo)
    memo.save()
    assert not (tmp_path / "memo.json").exists()


def test_a_memo_entry_for_a_file_that_became_a_pipe_is_not_used(tmp_path: Path) -> None:
    source = _tree(tmp_path)
    _settled()
    memo = StatMemo(tmp_path / "memo.json", settle_ns=SETTLE)
    tree_hash(source, memo=memo)
    (source / "pkg" / "a.py").unlink()
    os.mkfifo(source / "pkg" / "a.py")
    with pytest.raises(UsageError, match="named pipe"):
        tree_hash(source, memo=memo)


def test_a_prefetched_git_answer_is_the_same_answer(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "src" / "x.log").write_text("noise")
    (repo / "src" / "x.py").write_text("X = 1\n")
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    assert GitIgnored(repo).prefetch().under(repo / "src") == GitIgnored(repo).under(repo / "src")
    assert GitIgnored(repo).prefetch().under(repo / "src") == frozenset({"x.log"})


def _report(ctx_root: Path, key: str, outputs: list[dict[str, object]]) -> None:
    report = {"actions": [{"status": "cached", "inputs": key, "outputs": outputs}]}
    (ctx_root / "dist" / "report.json").write_text(json.dumps(report))


def test_a_no_op_hit_reads_neither_the_entry_nor_the_blobs(tmp_path: Path) -> None:
    ctx, action, cache = _setup(tmp_path)
    inner = Counting()
    first = wrapped(inner, cache).run(action, ctx, ())
    _report(tmp_path, first.inputs, [a.to_json(tmp_path) for a in first.outputs])
    # With its entry unreadable and its blob gone the cache could restore nothing:
    # only the checkout's own record of what is in place can answer (the entry
    # must still exist: only a key the cache holds is a hit).
    for path in cache.blobs.iterdir():
        path.unlink()
    (cache.actions / f"{first.inputs}.json").write_text("not json")
    again = wrapped(inner, ActionCache(tmp_path / "cache")).run(action, ctx, ())
    assert again.cached and inner.builds == 1
    assert again.outputs == first.outputs


def test_an_output_changed_since_the_report_is_restored_from_the_cache(tmp_path: Path) -> None:
    ctx, action, cache = _setup(tmp_path)
    inner = Counting()
    first = wrapped(inner, cache).run(action, ctx, ())
    _report(tmp_path, first.inputs, [a.to_json(tmp_path) for a in first.outputs])
    out = ctx.dist / "wheels" / "x.whl"
    out.write_text("tampered!")  # same size: the stat facts still change
    again = wrapped(inner, ActionCache(tmp_path / "cache")).run(action, ctx, ())
    assert again.cached and inner.builds == 1
    assert out.read_text() == "content a"


def test_a_report_naming_files_outside_dist_is_not_trusted(tmp_path: Path) -> None:
    ctx, action, cache = _setup(tmp_path)
    inner = Counting()
    first = wrapped(inner, cache).run(action, ctx, ())
    elsewhere = tmp_path / "elsewhere.whl"
    elsewhere.write_text("content a")
    forged = [{**first.outputs[0].to_json(tmp_path), "path": "elsewhere.whl"}]
    _report(tmp_path, first.inputs, forged)
    again = wrapped(inner, ActionCache(tmp_path / "cache")).run(action, ctx, ())
    assert again.cached
    assert [a.path for a in again.outputs] == [ctx.dist / "wheels" / "x.whl"]


def test_outputs_in_place_do_not_hide_an_empty_cache(tmp_path: Path) -> None:
    """A new cache folder (or one pruned) is filled by the next build, not skipped
    because dist/ already holds the outputs: a registry cache behind it, too."""
    ctx, action, cache = _setup(tmp_path)
    inner = Counting()
    first = wrapped(inner, cache).run(action, ctx, ())
    _report(tmp_path, first.inputs, [a.to_json(tmp_path) for a in first.outputs])
    fresh = ActionCache(tmp_path / "other-cache")
    again = wrapped(inner, fresh).run(action, ctx, ())
    assert not again.cached and inner.builds == 2
    assert (fresh.actions / f"{again.inputs}.json").is_file()
