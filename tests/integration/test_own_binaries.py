"""This repository's own release: `invoke release --snapshot` in a fresh clone, every zipapp run.

One snapshot release of the whole binaries.yaml (shipyard included) is made in a
fresh clone with the project's invoke, as a developer would after `make build`;
the tests then run what it built: every binary's zipapp with its `smoke`
arguments, and shipyard's own zipapp as a working CLI (issue 13: it did not start
from its archive). The clone is of this working tree (`_repo.copy_worktree`), so
the code under test is the code checked out here, committed or not.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from shipyard.manifest import Binary, load_manifest
from tests.integration._repo import clone, copy_worktree
from tests.integration.conftest import Services

pytestmark = [
    pytest.mark.integration,
    pytest.mark.requires("registry", "docker", "base-layout", "qemu-aarch64"),
]

REPO = Path(__file__).resolve().parents[2]
INVOKE = Path(sys.executable).parent / "invoke"
HOST = "linux_amd64" if os.uname().machine in ("x86_64", "amd64") else "linux_arm64"
# Nothing is pushed by a snapshot; the hub is still unique, should that ever change.
HUB = f"own-binaries-{uuid.uuid4().hex[:8]}"
BUDGET = 240.0  # seconds for the whole snapshot: a cold build of every binary


@dataclass(frozen=True)
class Snapshot:
    """A finished snapshot release of this repository in a fresh clone."""

    root: Path
    version: str
    run: subprocess.CompletedProcess[str]
    seconds: float
    env: dict[str, str]


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without what would make a zipapp import other code."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return {**env, "NO_COLOR": "1", **extra}


@pytest.fixture(scope="module")
def snapshot(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Snapshot]:
    work = tmp_path_factory.mktemp("own-binaries")
    source = copy_worktree(work / "source")
    root = clone(source, work / "clone")
    env = clean_env(
        CI="1",
        BASE_IMAGE=f"oci-layout:{services.base_layout}",
        HUB=f"{services.registry}/{HUB}",
        DOCKER_HOST=services.docker_host,
        SHIPYARD_CACHE_DIR=str(work / "cache"),
        SHIPYARD_ZIPAPP_ROOT=str(work / "zipapps"),
    )
    for key in ("VERSION", "TAG", "SHIPYARD_INDEX_URL"):
        env.pop(key, None)
    started = time.monotonic()
    run = subprocess.run(
        [str(INVOKE), "release", "--snapshot"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=600,
    )
    seconds = time.monotonic() - started
    release_dir = Path(run.stdout.strip().splitlines()[-1]) if run.stdout.strip() else root
    version = release_dir.name
    yield Snapshot(root, version, run, seconds, env)
    shutil.rmtree(work, ignore_errors=True)


def manifest_binaries(root: Path) -> dict[str, Binary]:
    return dict(load_manifest(root / "binaries.yaml", {}).binaries)


def zipapp_for_host(snapshot: Snapshot, name: str) -> Path:
    """The binary's zipapp that runs here: the universal one or this platform's."""
    zipapps = snapshot.root / "dist" / "zipapps"
    for candidate in (f"{name}-{snapshot.version}.pyz", f"{name}-{snapshot.version}-{HOST}.pyz"):
        if (zipapps / candidate).is_file():
            return zipapps / candidate
    raise AssertionError(f"{name}: no zipapp for {HOST} in {sorted(os.listdir(zipapps))}")


def run_zipapp(
    snapshot: Snapshot, pyz: Path, *args: str, python: str = sys.executable
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, str(pyz), *args],
        cwd=snapshot.root,
        capture_output=True,
        text=True,
        check=False,
        env=snapshot.env,
        timeout=120,
    )


def test_invoke_release_snapshot_of_this_repository_exits_0(snapshot: Snapshot) -> None:
    run = snapshot.run
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr[-6000:]}"
    info = json.loads(
        (snapshot.root / "dist/release" / snapshot.version / "release.json").read_text()
    )
    assert info["snapshot"] is True and info["version"] == snapshot.version
    for stage in ("preflight", "build", "validate", "stage"):
        assert any(line.split()[:2] == [stage, "ran"] for line in run.stderr.splitlines()), stage
    assert snapshot.seconds < BUDGET, f"the snapshot took {snapshot.seconds:.0f} s"


def test_every_binary_is_smoke_run_from_its_zipapp_or_image(snapshot: Snapshot) -> None:
    """Every binary of binaries.yaml, shipyard included: its zipapp runs its smoke args."""
    assert snapshot.run.returncode == 0, snapshot.run.stderr[-3000:]
    binaries = manifest_binaries(snapshot.root)
    assert "shipyard" in binaries
    for name, binary in binaries.items():
        if "zipapp" not in binary.outputs:
            # Shipped as an image only (echo-docker): validate smoke-ran the image.
            assert f"image smoke {name} " in snapshot.run.stderr, name
            continue
        pyz = zipapp_for_host(snapshot, name)
        done = run_zipapp(snapshot, pyz, *(binary.smoke or ("--version",)))
        assert done.returncode == 0, f"{pyz.name}: {done.stderr}"
        assert snapshot.version in done.stdout, f"{pyz.name} printed {done.stdout!r}"
        assert f"smoke {pyz.name}: " in snapshot.run.stderr  # and validate ran it too
    # Each image variant is smoke-run from its own tarball, named in the line.
    for variant in ("debug", "distroless"):
        tarball = f"mesh-agent-{snapshot.version}-{variant}-{HOST}.tar"
        assert f"image smoke mesh-agent ({tarball}) on linux/" in snapshot.run.stderr, variant


def test_shipyards_own_zipapp_prints_its_version_and_works(snapshot: Snapshot) -> None:
    assert snapshot.run.returncode == 0, snapshot.run.stderr[-3000:]
    pyz = snapshot.root / "dist" / "zipapps" / f"shipyard-{snapshot.version}-{HOST}.pyz"
    python3 = shutil.which("python3", path=os.environ.get("PATH")) or sys.executable
    # The interpreter on PATH and the project's, which has another shipyard installed:
    # the zipapp reports (and uses) its own version in both.
    for python in (python3, sys.executable):
        for flag in ("--version", "--tool-version"):
            done = run_zipapp(snapshot, pyz, flag, python=python)
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == f"shipyard {snapshot.version}", (python, flag)
    check = run_zipapp(snapshot, pyz, "check")
    assert check.returncode == 0, check.stderr
    assert "ok, " in check.stdout
    plan = run_zipapp(snapshot, pyz, "plan", "--json", "--target=standard")
    assert plan.returncode == 0, plan.stderr
    assert "zipapp:shipyard" in {a["id"] for a in json.loads(plan.stdout)["actions"]}


def test_mesh_agent_ships_its_variants_within_its_size_budget(snapshot: Snapshot) -> None:
    """mesh-agent's `debug` and `distroless` variants (issue 15) are staged beside its
    image with suffixed tags, each platform of each within the binary's image budget."""
    from shipyard.artifacts import Artifact
    from shipyard.engine.sizes import measure

    assert snapshot.run.returncode == 0, snapshot.run.stderr[-3000:]
    folder = snapshot.root / "dist/release" / snapshot.version
    info = json.loads((folder / "release.json").read_text())
    images = {
        a.get("variant", ""): a
        for a in info["artifacts"]
        if a["kind"] == "image" and a["binary"] == "mesh-agent"
    }
    assert sorted(images) == ["", "debug", "distroless"]
    assert len({a["digest"] for a in images.values()}) == 3
    budget = manifest_binaries(snapshot.root)["mesh-agent"].size["image"]
    assert budget.min is not None and budget.max is not None
    for variant, art in images.items():
        assert art["path"] == ("images/mesh-agent" + (f"/variants/{variant}" if variant else ""))
        assert all(t.endswith(f"-{variant}") for t in art["tags"] if variant), art["tags"]
        index = folder / art["path"] / "index.json"
        sizes = measure(Artifact("image", "mesh-agent", "any", index, "", 0))
        assert sorted(m.platform for m in sizes) == ["linux/amd64", "linux/arm64/v8"]
        for m in sizes:
            assert budget.min <= m.size <= budget.max, (variant, m)


def test_meshctl_ships_for_istioctl_s_six_platforms(snapshot: Snapshot) -> None:
    """meshctl (pure Python) is one zipapp for linux, darwin and windows on amd64 and
    arm64, staged as six release archives; its image stays on the two Linux platforms."""
    import tarfile
    import zipfile

    assert snapshot.run.returncode == 0, snapshot.run.stderr[-3000:]
    folder = snapshot.root / "dist/release" / snapshot.version
    info = json.loads((folder / "release.json").read_text())
    mine = [a for a in info["artifacts"] if a.get("binary") == "meshctl"]
    zipapps = [a for a in mine if a["kind"] == "zipapp"]
    assert [(Path(a["path"]).name, a["platform"]) for a in zipapps] == [
        (f"meshctl-{snapshot.version}.pyz", "any")
    ]
    archives = {a["platform"]: Path(a["path"]).name for a in mine if a["kind"] == "archive"}
    v = snapshot.version
    assert archives == {
        "linux/amd64": f"meshctl-{v}-linux-amd64.tar.gz",
        "linux/arm64": f"meshctl-{v}-linux-arm64.tar.gz",
        "darwin/amd64": f"meshctl-{v}-darwin-amd64.tar.gz",
        "darwin/arm64": f"meshctl-{v}-darwin-arm64.tar.gz",
        "windows/amd64": f"meshctl-{v}-windows-amd64.zip",
        "windows/arm64": f"meshctl-{v}-windows-arm64.zip",
    }
    with zipfile.ZipFile(folder / "archives" / archives["windows/arm64"]) as archive:
        names = sorted(n.partition("/")[2] for n in archive.namelist() if not n.endswith("/"))
        launcher = archive.read(f"meshctl-{v}-windows-arm64/meshctl.cmd")
    assert names == ["README.txt", "meshctl.cmd", "meshctl.pyz"]
    assert b'meshctl.pyz" %*' in launcher and launcher.endswith(b"\r\n")
    with tarfile.open(folder / "archives" / archives["darwin/arm64"]) as archive:
        program = archive.getmember(f"meshctl-{v}-darwin-arm64/meshctl")
    assert program.mode == 0o755
    (image,) = [a for a in mine if a["kind"] == "image"]
    assert sorted(image["platform"]) == ["linux/amd64", "linux/arm64/v8"]
