"""Crash consistency: SIGKILL during the local cache write leaves no partial entry.

The helpers, the tiny repository and what is checked: tests/integration/_crash.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.integration._crash import (
    Tiny,
    _assert_recovered,
    _baseline,
    _big_zipapp,
    _cache_state,
    _cli_env,
    _dist_problems,
    _Moments,
    _recover,
    _sigkill,
    _stored,
    _timed,
    _trial_figures,
    tiny,
)
from tests.integration._repo import clone
from tests.reliability import record

__all__ = ["tiny"]  # the fixture the test takes, imported here for pytest to find

pytestmark = pytest.mark.integration


@pytest.mark.reliability
def test_sigkill_during_the_cache_write_leaves_no_partial_entry(tiny: Tiny, tmp_path: Path) -> None:
    # Every action but meshctl's zipapp is cached: each run restores the others,
    # builds that zipapp (with the payload) and stores it. Kills are timed from the
    # moment it is in dist/: hashing it, then writing its blob and entry to the
    # cache follow; the write is over when the entry is there.
    root = clone(tiny.origin, tmp_path / "repo")
    big = _big_zipapp(root, tiny)

    def prepare(name: str) -> tuple[Path, list[str]]:
        big.unlink(missing_ok=True)
        shutil.copytree(tiny.warm_cache, tmp_path / name)
        return tmp_path / name, ["build", f"--cache-dir={tmp_path / name}"]

    def measure(run: int) -> float:
        cache, args = prepare(f"cache-baseline-{run}")
        done = _stored(cache, len(tiny.good))
        return _timed(root, args, tmp_path / "base.log", _cli_env(tmp_path), big.exists, done)

    window = _baseline(measure)
    moments = _Moments(7002, window)
    partial = recovered = caught_writing = 0
    for trial, delay in enumerate(moments):
        cache, args = prepare(f"cache-{trial}")
        _sigkill(root, args, delay, tmp_path / f"kill-{trial}.log", _cli_env(tmp_path), big.exists)
        state = _cache_state(cache)
        problems = [*_dist_problems(root / "dist", tiny.good), *state.problems]
        partial += len(problems)
        assert not problems, f"trial {trial} (killed at {delay * 1000:.1f}ms): {problems}"
        moments.landed(len(state.entries) < len(tiny.good))
        caught_writing += state.temporaries > 0
        _recover(root, args, tmp_path / "next.log", _cli_env(tmp_path))
        _assert_recovered(root, tiny.good, cache, trial)
        recovered += 1
    leaked = moments.finish(tmp_path, "landed before the entry")
    record(
        "SIGKILL during the local cache write",
        area="crash",
        cases=moments.trials,
        injected=f"SIGKILL at {moments.trials} random moments across the {window * 1000:.0f}ms "
        "from a 4 MiB zipapp's appearance in dist/ to its cache entry (hash, blob, entry)",
        result=f"{moments.summary()} ({caught_writing} inside a file write); partial "
        f"artifacts seen {partial}; recovered {recovered}/{moments.trials}, outputs "
        "byte-identical, temporaries swept",
        figures=_trial_figures(
            moments,
            partial,
            recovered,
            leaked,
            killed_inside_a_file_write=caught_writing,
            window_ms=round(window * 1000, 1),
        ),
    )
