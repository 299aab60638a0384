"""The example suite as a user's repository runs its test stages through nox (issue 26).

A fresh copy of examples/mesh laid out as its own uv workspace, locked by uv, with a
noxfile.py of two lines (`from shipyard.nox import stages; stages()`): `nox -l` lists
the stage sessions, `nox -s test` runs every project's stages through `shipyard
test` (mesh-discovery's integration tests against the server the stage starts), a
second `nox -s test` restores every stage from the cache, and `nox -s unit -- -k`
hands its arguments to pytest.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.integration.conftest import Services

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MEMBERS = ("agent", "cni", "ctl", "discovery", "echo", "libs/api", "libs/config")

PYPROJECT = """\
[tool.uv.workspace]
members = [%s]

[tool.uv.sources]
mesh-api = { workspace = true }
mesh-config = { workspace = true }

"""
MANIFEST = """\
schema: 1
project: {name: mesh}
binaries:
  meshctl: {source: ctl, entrypoint: "meshctl.cli:main"}
  mesh-discovery: {source: discovery, entrypoint: "meshdiscovery.server:main"}
tests:
  projects:
    mesh-discovery:
      integration:
        services:
          - name: discovery
            start: mesh-discovery --port {port}
"""
NOXFILE = "from shipyard.nox import stages\n\nstages()\n"


def _run(cwd: Path, *command: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "SHIPYARD_CACHE_DIR": str(cache),
        "CI": "true",
        "PATH": f"{BIN}:{os.environ['PATH']}",
    }
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False
    )


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("suite") / "mesh"
    root.mkdir()
    for member in MEMBERS:
        shutil.copytree(
            REPO / "examples/mesh" / member,
            root / member,
            ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", "dist", "*.egg-info"),
        )
    listed = ", ".join(f'"{m}"' for m in MEMBERS)
    # The repository's ruff settings, as the examples are linted here.
    own = (REPO / "pyproject.toml").read_text()
    ruff = own[own.index("[tool.ruff]") : own.index("[tool.mypy]")]
    (root / "pyproject.toml").write_text(PYPROJECT % listed + "\n" + ruff)
    (root / "binaries.yaml").write_text(MANIFEST)
    (root / "noxfile.py").write_text(NOXFILE)
    (root / ".gitignore").write_text("/dist/\n/.shipyard/\n/.nox/\n")
    subprocess.run([str(BIN / "uv"), "lock", "--quiet"], cwd=root, check=True, timeout=600)
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "the example suite"], check=True)
    return root


def _stages(root: Path) -> dict[str, dict[str, object]]:
    data = json.loads((root / "dist/report.json").read_text())
    return {a["id"]: a for a in data["actions"] if a["kind"] == "test"}


def test_nox_lists_the_stage_sessions(suite: Path, tmp_path: Path) -> None:
    done = _run(suite, str(BIN / "nox"), "-l", cache=tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    listed = [line.split()[1] for line in done.stdout.splitlines() if line[:2] in ("* ", "- ")]
    assert listed == ["lint", "typecheck", "unit", "integration", "test"]


def test_nox_runs_every_projects_stages_then_restores_them(suite: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    done = _run(suite, str(BIN / "nox"), "-s", "test", cache=cache)
    assert done.returncode == 0, done.stdout + done.stderr
    stages = _stages(suite)
    projects = {str(a["project"]) for a in stages.values()}
    assert projects == {
        "mesh-agent", "mesh-api", "mesh-cni", "mesh-config", "mesh-discovery",
        "mesh-echo", "meshctl",
    }  # fmt: skip
    assert {a["status"] for a in stages.values()} == {"built"}
    for key in projects:
        assert f"test:{key}:lint" in stages and f"test:{key}:unit" in stages
        unit = stages[f"test:{key}:unit"]["tests"]
        assert isinstance(unit, dict) and unit["passed"] >= 3 and unit["failed"] == 0
    live = stages["test:mesh-discovery:integration"]["tests"]
    assert isinstance(live, dict) and live["passed"] >= 2 and live["skipped"] == 0
    assert (suite / "dist/test-results.xml").is_file()

    again = _run(suite, str(BIN / "nox"), "-s", "test", cache=cache)
    assert again.returncode == 0, again.stdout + again.stderr
    assert {a["status"] for a in _stages(suite).values()} == {"cached"}

    # Arguments after -- reach the stage's pytest: one test selected by name.
    narrowed = _run(
        suite,
        str(BIN / "nox"),
        "-s",
        "unit",
        "--",
        "--project",
        "mesh-api",
        "-k",
        "base_url",
        cache=cache,
    )
    assert narrowed.returncode == 0, narrowed.stdout + narrowed.stderr
    tally = _stages(suite)["test:mesh-api:unit"]["tests"]
    full = stages["test:mesh-api:unit"]["tests"]
    assert isinstance(tally, dict) and isinstance(full, dict)
    assert 0 < tally["tests"] < full["tests"]


@pytest.mark.requires("registry")
def test_shards_share_their_results_through_the_registry_cache(
    suite: Path, tmp_path: Path, services: Services
) -> None:
    remote = f"--cache=oci://{services.registry}/shipyard-cache/{uuid.uuid4().hex[:12]}"
    ran: dict[str, str] = {}
    for index in (1, 2):
        machine = tmp_path / f"shard{index}"
        subprocess.run(["git", "clone", "-q", str(suite), str(machine)], check=True)
        done = _run(
            machine,
            sys.executable, "-m", "shipyard", "test", f"--shard={index}/2", remote,
            cache=tmp_path / f"cache{index}",
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        ran.update({k: str(a["status"]) for k, a in _stages(machine).items()})
    assert set(ran.values()) == {"built"}
    merge = tmp_path / "merge"
    subprocess.run(["git", "clone", "-q", str(suite), str(merge)], check=True)
    done = _run(merge, sys.executable, "-m", "shipyard", "test", remote, cache=tmp_path / "empty")
    assert done.returncode == 0, done.stdout + done.stderr
    stages = _stages(merge)
    assert set(stages) == set(ran)  # every stage ran on one of the shards
    assert {a["status"] for a in stages.values()} == {"cached"}
    assert not (merge / ".shipyard/envs").exists()  # nothing ran: no environment was made
