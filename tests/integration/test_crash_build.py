"""Crash consistency: SIGKILL during a build leaves no partial output in dist/.

The helpers, the tiny repository and what is checked: tests/integration/_crash.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.integration._crash import (
    Tiny,
    _assert_recovered,
    _cache_state,
    _cli_env,
    _dist_problems,
    _Moments,
    _recover,
    _sigkill,
    _trial_figures,
    tiny,
)
from tests.integration._repo import clone
from tests.reliability import record

__all__ = ["tiny"]  # the fixture the test takes, imported here for pytest to find

pytestmark = pytest.mark.integration


@pytest.mark.reliability
def test_sigkill_during_a_build_leaves_no_partial_output(tiny: Tiny, tmp_path: Path) -> None:
    root = clone(tiny.origin, tmp_path / "repo")
    moments = _Moments(7001, tiny.build_seconds)
    warm = tmp_path / "warm-cache"
    partial = recovered = caught_writing = 0
    for trial, delay in enumerate(moments):
        # One trial in five starts from an empty cache, so the run after the kill
        # must build what is missing; the others force a full build over a cache
        # filled by earlier runs (and rewrite its entries).
        fresh = trial % 5 == 0
        cache = tmp_path / f"cache-{trial}" if fresh else warm
        if trial % 2 == 0:  # half start with no outputs at all
            shutil.rmtree(root / "dist", ignore_errors=True)
        args = ["build", f"--cache-dir={cache}", *([] if fresh else ["--force"])]
        killed = _sigkill(root, args, delay, tmp_path / f"kill-{trial}.log", _cli_env(tmp_path))
        moments.landed(killed)
        state = _cache_state(cache)
        problems = [*_dist_problems(root / "dist", tiny.good), *state.problems]
        partial += len(problems)
        assert not problems, f"trial {trial} (killed at {delay:.2f}s): {problems}"
        caught_writing += state.temporaries > 0
        _recover(root, ["build", f"--cache-dir={cache}"], tmp_path / "next.log", _cli_env(tmp_path))
        _assert_recovered(root, tiny.good, cache, trial)
        recovered += 1
    leaked = moments.finish(tmp_path, "landed mid-build")
    record(
        "SIGKILL during a build",
        area="crash",
        cases=moments.trials,
        injected=f"SIGKILL of the build's process group at {moments.trials} random moments "
        f"across an uninterrupted build ({tiny.build_seconds:.1f}s: 2 binaries, wheel + zipapp)",
        result=f"{moments.summary()}; partial artifacts seen {partial}; recovered "
        f"{recovered}/{moments.trials}, outputs byte-identical",
        figures=_trial_figures(
            moments,
            partial,
            recovered,
            leaked,
            killed_inside_a_cache_file_write=caught_writing,
            baseline_seconds=round(tiny.build_seconds, 2),
        ),
    )
