"""Crash consistency: SIGKILL during a push never tags an incomplete image.

The helpers, the tiny repository and what is checked: tests/integration/_crash.py.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from shipyard.oci.remote.push import read_layout_image
from tests.integration._crash import (
    IMAGE_MANIFEST,
    PAYLOAD,
    RUN,
    RegistryView,
    _baseline,
    _cli_env,
    _Moments,
    _recover,
    _sigkill,
    _timed,
    _trial_figures,
)
from tests.integration.conftest import Services
from tests.integration.test_push import make_layout
from tests.reliability import record

pytestmark = pytest.mark.integration


@pytest.mark.reliability
@pytest.mark.requires("registry")
def test_sigkill_during_a_push_never_tags_an_incomplete_image(
    services: Services, tmp_path: Path
) -> None:
    root = tmp_path / "repo"
    (root / "app").mkdir(parents=True)
    (root / "app" / "pyproject.toml").write_text('[project]\nname = "app"\nversion = "1.0"\n')
    (root / "binaries.yaml").write_text(IMAGE_MANIFEST)
    layout = root / "dist" / "images" / "app"
    platforms = ("linux/amd64", "linux/arm64", "linux/arm/v7")
    shared = random.Random(7003).randbytes(PAYLOAD)
    digest = make_layout(layout, platforms, "crash", shared=shared)
    blobs = [blob.digest for blob in read_layout_image(layout).blobs]
    view = RegistryView(services.registry)
    log = tmp_path / "push.log"

    def pushing() -> bool:  # the first step line: the first blob is up
        return log.exists() and log.stat().st_size > 0

    def pushed() -> bool:  # the last line, printed once every tag has moved
        return "tags: " in log.read_text()

    def hub(name: str) -> dict[str, str]:
        return _cli_env(tmp_path, HUB=f"{services.registry}/crash-{RUN}/{name}")

    window = _baseline(lambda run: _timed(root, ["push"], log, hub(f"base{run}"), pushing, pushed))
    good, missing = view.tagged(f"crash-{RUN}/base0/app")
    assert good == {"1.0.0": digest, "latest": digest} and not missing
    moments = _Moments(7004, window)
    partial = recovered = 0
    for trial, delay in enumerate(moments):
        repo = f"crash-{RUN}/push-{trial}/app"
        _sigkill(root, ["push"], delay, log, hub(f"push-{trial}"), pushing)
        tags, missing = view.tagged(repo)
        wrong = [f"{repo}:{t} -> {d}" for t, d in tags.items() if d != digest]
        partial += len(missing) + len(wrong)
        assert not missing and not wrong, f"trial {trial} ({delay * 1000:.0f}ms): {missing}"
        moments.landed(len(tags) < 2)
        _recover(root, ["push"], tmp_path / "next.log", hub(f"push-{trial}"))
        tags, missing = view.tagged(repo)
        assert tags == good and not missing, f"trial {trial}: {tags} {missing}"
        assert all(view.has_blob(repo, blob) for blob in blobs), f"trial {trial}"
        recovered += 1
    leaked = moments.finish(tmp_path, "landed before the tags")
    record(
        "SIGKILL during an image push",
        area="crash",
        cases=moments.trials,
        injected=f"SIGKILL of `shipyard push` at {moments.trials} random moments across the "
        f"{window * 1000:.0f}ms push of a 3-platform layout (7 blobs, 4 manifests, 2 tags)",
        result=f"{moments.summary()}; partial artifacts seen {partial} (GET of every tagged "
        f"manifest and child, HEAD of every blob); recovered {recovered}/{moments.trials}, "
        "digests equal",
        figures=_trial_figures(
            moments, partial, recovered, leaked, window_ms=round(window * 1000, 1)
        ),
    )
