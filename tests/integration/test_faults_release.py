"""A whole release (images to two hubs, wheels to the index) through a faulty network.

What the faults are and what every test checks: tests/integration/_faults.py.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from pathlib import Path

import pytest

from shipyard._fs import sha256_file
from shipyard.errors import ShipyardError
from shipyard.oci.remote.registry import Registry
from shipyard.release import ReleaseOptions, prepare_release, release
from tests.integration._faults import (
    ATTEMPTS,
    RATE,
    RUN,
    SEEDS,
    STALL,
    PackageServer,
    client_env,
    describe,
    fast_retry,
    faulty_index,
    pypiserver,
    retry_lines,
    worst_single,
)
from tests.integration._release import BUILDERS, INDEX_PASSWORD, INDEX_USER, make_repo
from tests.integration.conftest import Services
from tests.integration.faultproxy import running_proxy
from tests.reliability import record

__all__ = ["pypiserver"]  # fixtures the tests take, imported for pytest to find
pytestmark = [
    pytest.mark.integration,
    pytest.mark.reliability,
    pytest.mark.requires("registry"),
]


def release_once(
    services: Services,
    pypiserver: PackageServer,
    repo: Path,
    seed: int,
    caplog: pytest.LogCaptureFixture,
) -> tuple[list[str], Counter[str], int, int]:
    """One release of `repo` through faulty proxies seeded with `seed`.

    Returns the problems found, the faults injected, the requests seen and the
    retries logged.
    """
    version = f"1.0.{seed}"
    logged = len(retry_lines(caplog))
    with (
        running_proxy(services.registry, rate=RATE, seed=seed, stall_seconds=STALL) as hub,
        running_proxy(pypiserver.host, rate=RATE, seed=seed + 1, stall_seconds=STALL) as pypi,
    ):
        env = {
            **os.environ,
            **client_env(),
            "HUB_A": f"{hub.host}/rel-faults-a{seed}-{RUN}",
            "HUB_B": f"{hub.host}/rel-faults-b{seed}-{RUN}",
            "SHIPYARD_INDEX_URL": pypi.url,
            "SHIPYARD_INDEX_USER": INDEX_USER,
            "SHIPYARD_INDEX_PASSWORD": INDEX_PASSWORD,
        }
        ctx = prepare_release(
            repo / "binaries.yaml",
            ReleaseOptions(version=version),
            env=env,
            builders=BUILDERS,
            registry_for=lambda host: Registry(host, retry=fast_retry(), environ=env),
            index=faulty_index(pypi),
        )
        failed = False
        try:
            release(ctx)
        except ShipyardError:
            failed = True  # the stage and its error are in ctx.results
    injected = hub.injected + pypi.injected
    requests_seen = hub.requests + pypi.requests
    retries = len(retry_lines(caplog)) - logged
    problems = [f"{r.name}: {r.status} {r.reason}" for r in ctx.results if r.status != "ran"]
    if failed:
        return [f"seed {seed}: {p}" for p in problems], injected, requests_seen, retries
    staged = json.loads((repo / "dist" / "release" / version / "release.json").read_text())
    clean = Registry(services.registry, environ=client_env())
    for art in staged["artifacts"]:
        if art["kind"] == "image":
            for prefix in ("a", "b"):
                for tag in art["tags"]:
                    repository = f"rel-faults-{prefix}{seed}-{RUN}/{art['binary']}"
                    found = clean.manifest_exists(repository, tag)
                    if found != art["digest"]:
                        problems.append(f"{repository}:{tag} is {found}, staged {art['digest']}")
        if art["kind"] == "wheel":
            landed = pypiserver.packages / Path(art["path"]).name
            if not landed.is_file() or sha256_file(landed) != art["sha256"]:
                problems.append(f"{landed.name} did not land as staged")
    if sum(injected.values()) and not retries:
        problems.append(f"{sum(injected.values())} faults and no retry logged")
    return (
        [f"seed {seed}: {p}" for p in problems],
        hub.injected + pypi.injected,
        requests_seen,
        retries,
    )


def test_release_through_faults(
    services: Services,
    pypiserver: PackageServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    repo = make_repo(tmp_path / "repo")
    seeds = tuple(range(51, 51 + 2 * SEEDS, 2))
    started = time.monotonic()
    problems: list[str] = []
    injected: Counter[str] = Counter()
    requests_seen = retries = worst_run = 0
    for seed in seeds:
        found, faults, seen, logged = release_once(services, pypiserver, repo, seed, caplog)
        problems += found
        injected += faults
        requests_seen += seen
        retries += logged
        worst_run = max(worst_run, logged)
    seconds = time.monotonic() - started
    survived = len(seeds) - len({p.split(":")[0] for p in problems})
    worst = worst_single(caplog)
    faults_total = sum(injected.values())
    record(
        "whole release through faulty proxies (2 hubs, pypiserver)",
        area="retry budget",
        cases=len(seeds),
        injected=f"{faults_total} faults in {requests_seen} requests over {len(seeds)} fault "
        f"seeds at {RATE:.0%} ({describe(injected)})",
        result=f"{survived}/{len(seeds)} releases survived: preflight to verify ran, every tag "
        f"on both hubs and every wheel equal to release.json; {retries} retries logged in all, "
        f"at most {worst} for one request and {worst_run} for one release ({ATTEMPTS} attempts "
        f"allowed); {seconds:.1f}s",
        figures={
            "seeds": len(seeds),
            "successes": survived,
            "requests": requests_seen,
            "faults": faults_total,
            "retries": retries,
            "worst_retries_one_request": worst,
            "worst_retries_one_run": worst_run,
            "attempts_allowed": ATTEMPTS,
            "seconds": round(seconds, 1),
        },
    )
    assert not problems, "\n".join(problems)
