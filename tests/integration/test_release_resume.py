"""Releases killed or failing part-way: a rerun finishes, nothing is uploaded twice and
no tag moves before everything is in place. The setup: tests/integration/_release.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from shipyard._fs import sha256_file
from shipyard.errors import UsageError
from shipyard.oci.remote.registry import RegistryError
from shipyard.release import PackageIndexError, ReleaseOptions, release
from tests.integration._release import (
    _REFUSED,
    FAILURES,
    INDEX_PASSWORD,
    INDEX_USER,
    REPO,
    RUN,
    RUNNER,
    Hubs,
    PackageServer,
    _after,
    _sent,
    _tags_on,
    context,
    hubs,
    index_files,
    make_repo,
    pypiserver,
    release_env,
    tag_digests,
)
from tests.integration.conftest import Services
from tests.integration.faultproxy import running_proxy
from tests.reliability import record

__all__ = ["hubs", "pypiserver"]  # fixtures the tests take, imported for pytest to find
pytestmark = [pytest.mark.integration, pytest.mark.requires("registry", "skopeo")]


@pytest.mark.reliability
def test_killed_publish_resumes_without_uploading_twice(
    hubs: Hubs, pypiserver: PackageServer, tmp_path: Path
) -> None:
    import random

    repo = make_repo(tmp_path / "repo")
    env = release_env(hubs, pypiserver, f"rel-kill-{RUN}")
    rng = random.Random(1234)
    killed = 0
    trials = 20
    resumed_steps = 0
    for trial in range(trials):
        version = f"4.0.{trial}"
        journal = repo / "dist" / "release" / version / "publish.journal"
        process = subprocess.Popen(
            [sys.executable, "-c", RUNNER, str(repo), version],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        deadline = time.monotonic() + 120
        while not journal.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.6))
        if process.poll() is None:
            process.kill()
            killed += 1
        first = process.communicate()[0].splitlines()
        lines: list[str] = []
        ctx = context(repo, env, ReleaseOptions(version=version), lines)
        release(ctx)
        uploads = [
            line
            for line in first + lines
            if line.startswith(("pushed blob", "pushed manifest", "uploaded wheel", "tagged"))
        ]
        assert len(uploads) == len(set(uploads)), f"trial {trial}: uploaded twice: {uploads}"
        resumed_steps += sum(line.startswith("journalled ") for line in lines)
        staged = json.loads((journal.parent / "release.json").read_text())
        for art in staged["artifacts"]:
            if art["kind"] == "image":
                digests = tag_digests(hubs, f"rel-kill-{RUN}", (art["tags"][0],))
                mine = {k: v for k, v in digests.items() if f"/{art['binary']}:" in k}
                assert set(mine.values()) == {art["digest"]}, f"trial {trial}: {mine}"
            if art["kind"] == "wheel":
                served = pypiserver.packages / Path(art["path"]).name
                assert sha256_file(served) == art["sha256"]
    assert killed >= trials // 2, "too few runs were killed mid-way to test resuming"
    record(
        "release publish killed and re-run",
        area="crash",
        cases=trials,
        injected="SIGKILL at a random moment of publish (0-0.6 s after the journal appears)",
        result=(
            f"{killed} of {trials} runs killed mid-publish; every re-run finished, no upload "
            f"twice, {resumed_steps} journalled steps skipped, tags and index match release.json"
        ),
        figures={"killed": killed, "journalled_steps_skipped": resumed_steps},
    )


@pytest.mark.reliability
@pytest.mark.parametrize("failing", FAILURES)
def test_a_release_failing_part_way_moves_no_tag_and_a_rerun_finishes(
    services: Services, pypiserver: PackageServer, tmp_path: Path, failing: str
) -> None:
    repo = make_repo(tmp_path / "repo")
    prefix = f"rel-atomic-{failing}-{RUN}"
    version = f"9.0.{FAILURES.index(failing)}"  # the index is shared by the module's tests
    tags = (version, "latest")
    index_host = urlsplit(pypiserver.url).netloc
    with (
        running_proxy(services.registry, rate=0.0) as hub_a,
        running_proxy(services.registry, rate=0.0) as hub_b,
        running_proxy(index_host, rate=0.0) as index,
    ):
        env = {
            **os.environ,
            "HUB_A": f"{hub_a.host}/{prefix}-a",
            "HUB_B": f"{hub_b.host}/{prefix}-b",
            "SHIPYARD_INDEX_URL": index.url,
            "SHIPYARD_INDEX_USER": INDEX_USER,
            "SHIPYARD_INDEX_PASSWORD": INDEX_PASSWORD,
        }
        if failing == "hub-b-manifest":  # the second hub takes one manifest, then refuses
            hub_b.force(400, body=_REFUSED, match=_after(1, "PUT", "/manifests/"))
        elif failing == "hub-b-blob":  # the second hub takes two blobs, then refuses
            hub_b.force(400, body=_REFUSED, match=_after(2, "PUT", "/blobs/uploads/"))
        else:  # the index takes the credentials check and one wheel, then refuses
            index.force(403, body=b"forbidden", match=_after(2, "POST", "/"))
        before = index_files(pypiserver)
        ctx = context(repo, env, ReleaseOptions(version=version))
        with pytest.raises((RegistryError, PackageIndexError)):
            release(ctx)
        assert [(r.name, r.status) for r in ctx.results][-2:] == [
            ("publish", "failed"),
            ("verify", "skipped"),
        ]
        # Nothing is tagged on either hub: no pull of 9.0.0 or latest sees a part.
        tagged = _tags_on(services.registry, (f"{prefix}-a", f"{prefix}-b"), tags)
        moved = {k: v for k, v in tagged.items() if v is not None}
        assert moved == {}, f"{failing}: tags moved before every upload succeeded: {moved}"
        uploaded_wheels = index_files(pypiserver) - before
        if failing != "index-upload":
            assert uploaded_wheels == set(), "wheels go after every image is on every hub"

        # A staged file changed between runs: the resumed publish refuses, sends nothing.
        folder = repo / "dist" / "release" / version
        staged = json.loads((folder / "release.json").read_text())
        wheel = folder / next(a["path"] for a in staged["artifacts"] if a["kind"] == "wheel")
        original = wheel.read_bytes()
        wheel.write_bytes(original + b"tampered")
        for proxy in (hub_a, hub_b, index):
            proxy.clear()
        sent, files = _sent(hub_a, hub_b), index_files(pypiserver)
        again = context(repo, env, ReleaseOptions(version=version))
        with pytest.raises(UsageError) as caught:
            release(again)
        assert caught.value.exit_code == 2
        assert str(wheel) in str(caught.value) and "changed since it was staged" in str(
            caught.value
        )
        assert _sent(hub_a, hub_b) == sent, "nothing was pushed"
        assert index_files(pypiserver) == files, "nothing was uploaded"

        # Fixed: the re-run resumes and finishes; every tag names the staged digest.
        wheel.write_bytes(original)
        final = context(repo, env, ReleaseOptions(version=version))
        release(final)
        assert [r.status for r in final.results][-2:] == ["ran", "ran"]
    images = {a["binary"]: a["digest"] for a in staged["artifacts"] if a["kind"] == "image"}
    assert _tags_on(services.registry, (f"{prefix}-a", f"{prefix}-b"), tags) == {
        f"{hub_prefix}/{binary}:{tag}": images[binary]
        for hub_prefix in (f"{prefix}-a", f"{prefix}-b")
        for binary in ("meshctl", "mesh-agent")
        for tag in tags
    }
    record(
        f"release failing part-way ({failing})",
        area="release atomicity",
        cases=2,
        injected=f"{failing}: a refusal part-way through publish, then a staged wheel "
        "changed before the re-run",
        result=f"0 tags of {version} or latest moved on either hub before every upload "
        f"succeeded ({len(uploaded_wheels)} wheels already public); the tampered re-run "
        "exited 2 naming the file with 0 uploads; the fixed re-run finished and verified",
        figures={"tags_moved_early": 0, "uploads_after_tamper": 0},
    )
