"""Crash consistency: SIGKILL during a remote cache upload never tags a partial entry.

The helpers, the tiny repository and what is checked: tests/integration/_crash.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.integration._crash import (
    RUN,
    RegistryView,
    Tiny,
    _assert_recovered,
    _baseline,
    _big_zipapp,
    _cache_state,
    _cli_env,
    _dist_problems,
    _Moments,
    _outputs,
    _recover,
    _sigkill,
    _stored,
    _timed,
    _trial_figures,
    tiny,
)
from tests.integration._repo import clone
from tests.integration.conftest import Services
from tests.reliability import record

__all__ = ["tiny"]  # the fixture the test takes, imported here for pytest to find

pytestmark = pytest.mark.integration


@pytest.mark.reliability
@pytest.mark.requires("registry")
def test_sigkill_during_a_remote_cache_upload_never_tags_a_partial_entry(
    services: Services, tiny: Tiny, tmp_path: Path
) -> None:
    # As in the cache-write test, each run builds meshctl's zipapp and stores it;
    # with a remote cache it is uploaded (blobs, then the manifest tagged with the
    # action key) before it is written to the local cache.
    root = clone(tiny.origin, tmp_path / "repo")
    big = _big_zipapp(root, tiny)
    view = RegistryView(services.registry)

    def prepare(name: str) -> tuple[Path, list[str], str]:
        big.unlink(missing_ok=True)
        shutil.copytree(tiny.warm_cache, tmp_path / name)
        repo = f"crash-{RUN}/{name}"
        remote = f"--cache=oci://{services.registry}/{repo}"
        return tmp_path / name, ["build", f"--cache-dir={tmp_path / name}", remote], repo

    def measure(run: int) -> float:
        cache, args, _ = prepare(f"cache-baseline-{run}")
        done = _stored(cache, len(tiny.good))
        return _timed(root, args, tmp_path / "base.log", _cli_env(tmp_path), big.exists, done)

    window = _baseline(measure)
    good, missing = view.tagged(f"crash-{RUN}/cache-baseline-0")
    assert len(good) == 1 and not missing, (good, missing)
    # The reference bytes are those of an uninterrupted run of this same command.
    outputs = _outputs(root / "dist")
    moments = _Moments(7005, window)
    partial = recovered = untagged = 0
    for trial, delay in enumerate(moments):
        cache, args, repo = prepare(f"cache-{trial}")
        _sigkill(root, args, delay, tmp_path / f"kill-{trial}.log", _cli_env(tmp_path), big.exists)
        tags, missing = view.tagged(repo)
        state = _cache_state(cache)
        wrong = [f"{repo}:{t} -> {d}" for t, d in tags.items() if good.get(t) != d]
        problems = [*missing, *wrong, *state.problems, *_dist_problems(root / "dist", outputs)]
        partial += len(problems)
        assert not problems, f"trial {trial} (killed at {delay * 1000:.1f}ms): {problems}"
        # The remote is written first: a zipapp in the local cache is in the remote one.
        local = state.entries - tiny.warm_keys
        assert local <= set(tags), f"trial {trial}: {sorted(local - set(tags))} is only local"
        moments.landed(len(state.entries) < len(tiny.good))
        untagged += not tags
        _recover(root, args, tmp_path / "next.log", _cli_env(tmp_path))
        _assert_recovered(root, outputs, cache, trial)
        tags, missing = view.tagged(repo)
        assert tags == good and not missing, f"trial {trial}: {tags} {missing}"
        recovered += 1
    leaked = moments.finish(tmp_path, "landed mid-upload")
    record(
        "SIGKILL during a remote cache upload",
        area="crash",
        cases=moments.trials,
        injected=f"SIGKILL at {moments.trials} random moments across the {window * 1000:.0f}ms "
        "from a 4 MiB zipapp's appearance in dist/ to its cache entry (upload to oci://, "
        "then the local write)",
        result=f"{moments.summary()} ({untagged} before the key was tagged); partial "
        f"artifacts seen {partial} (GET of every tagged manifest, HEAD of every blob); "
        f"recovered {recovered}/{moments.trials}, outputs byte-identical, tag digests equal "
        "to an uninterrupted run",
        figures=_trial_figures(
            moments,
            partial,
            recovered,
            leaked,
            killed_before_the_tag=untagged,
            window_ms=round(window * 1000, 1),
        ),
    )
