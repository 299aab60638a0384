"""Real wheels of the example suite: built twice byte-identical, installed, run."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from shipyard.stamp import Stamp
from tests.integration._repo import copy_worktree

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = {
    "standard": {
        "meshctl": "meshctl",
        "mesh-discovery": "mesh-discovery",
        "echo": "mesh-echo",
        "shipyard": "shipyard",
    },
    "agent": {"mesh-agent": "mesh-agent"},
    "linux-only": {"mesh-cni": "mesh-cni", "mesh-agent": "mesh-agent"},
}


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "CI": "1", **env},
    )


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh repository with this working tree's files."""
    return copy_worktree(tmp_path_factory.mktemp("clone"))


def _digests(dist: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(dist.glob("*.whl"))}


def _differing_entry(a: Path, b: Path) -> str:
    with zipfile.ZipFile(a) as left, zipfile.ZipFile(b) as right:
        lnames, rnames = left.namelist(), right.namelist()
        if lnames != rnames:
            return f"entry lists differ: {sorted(set(lnames) ^ set(rnames)) or 'order'}"
        for name in lnames:
            li, ri = left.getinfo(name), right.getinfo(name)
            if (
                left.read(name) != right.read(name)
                or li.date_time != ri.date_time
                or (li.external_attr != ri.external_attr)
            ):
                return name
    return "zip metadata only"


def test_standard_wheels_are_reproducible(checkout: Path) -> None:
    wheels_only = ["--target=standard", "--output=wheel", "--no-cache"]
    first = _run([sys.executable, "-m", "shipyard", "build", *wheels_only], checkout)
    assert first.returncode == 0, first.stderr
    wheels = checkout / "dist" / "wheels"
    before = _digests(wheels)
    assert len(before) == 5, before  # meshctl, mesh-discovery, echo, shipyard; mesh-api
    saved = checkout.parent / "first-wheels"
    shutil.copytree(wheels, saved)
    shutil.rmtree(checkout / "dist")
    second = _run([sys.executable, "-m", "shipyard", "build", *wheels_only, "-j", "1"], checkout)
    assert second.returncode == 0, second.stderr
    after = _digests(wheels)
    for name, digest in before.items():
        assert after.get(name) == digest, (
            f"{name} differs between builds at {_differing_entry(saved / name, wheels / name)}"
        )
    report = json.loads((checkout / "dist" / "report.json").read_text())
    assert {a["status"] for a in report["actions"]} == {"built"}
    for action in report["actions"]:
        (output,) = action["outputs"]
        assert after[Path(output["path"]).name] == output["sha256"]
        assert len(action["inputs"]) == 64


def test_every_target_installs_and_prints_the_stamped_version(
    checkout: Path, tmp_path: Path
) -> None:
    for target in ("agent", "linux-only", "standard"):
        done = _run(
            [sys.executable, "-m", "invoke", "build", f"--target={target}", "--output=wheel"],
            checkout,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((checkout / "dist" / "report.json").read_text())
    version = report["version"]
    assert version.startswith("0.0.0.dev1+g")
    created = Stamp(version, None, False, report["source_date_epoch"]).created
    build = f"(rev {report['revision'][:7]}, built {created})"  # stamped into every wheel
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    wheels = sorted(str(p) for p in (checkout / "dist" / "wheels").glob("*.whl"))
    assert len(wheels) == 8, wheels  # six projects' and the libraries mesh-api, mesh-config
    install = _run(
        [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", *wheels], tmp_path
    )
    assert install.returncode == 0, install.stderr
    scripts = {s for group in SCRIPTS.values() for s in group.values()}
    for script in sorted(scripts - {"shipyard"}):
        shown = _run([str(env_dir / "bin" / script), "--version"], tmp_path)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout == f"{script} {version} {build}\n", shown.stdout
    tool = _run([str(env_dir / "bin" / "shipyard"), "--tool-version"], tmp_path)
    assert tool.stdout.strip() == f"shipyard {version}"
