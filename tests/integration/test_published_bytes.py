"""Published bytes depend on content only (issue 27, item 5).

Two clones of one commit whose base layouts hold the same image but were written by
different commands (a plain copy, and skopeo's own `oci:` writer, whose index.json
differs) build meshctl's image under different action keys; the index they push has
one digest. The same after bumping shipyard's own version, which is part of every
action key.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration._repo import clone, copy_worktree
from tests.integration.conftest import Services

pytestmark = [pytest.mark.integration, pytest.mark.requires("registry", "skopeo", "base-layout")]

BASE = Path(".shipyard/base/python-3.11")  # binaries.yaml's default base, in each clone
_RUN = (
    "import sys, shipyard; shipyard.__version__ = sys.argv.pop(1); "
    "from shipyard.cli import run; run()"
)


def _build(root: Path, cache: Path, version: str = "") -> dict[str, str]:
    """Build meshctl's image in `root` (with shipyard's own version set to `version`,
    when given); the image action's key and the index digest it made."""
    env = {k: v for k, v in os.environ.items() if k != "BASE_IMAGE"}
    env |= {"CI": "1", "SHIPYARD_CACHE_DIR": str(cache)}
    command = [sys.executable, "-m", "shipyard"]
    if version:
        command = [sys.executable, "-c", _RUN, version]
    done = subprocess.run(
        [*command, "build", "--binary=meshctl", "--output=image"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads((root / "dist/report.json").read_text())
    (image,) = [a for a in report["actions"] if a["kind"] == "image"]
    (index,) = [o for o in image["outputs"] if o["kind"] == "image"]
    return {"key": image["inputs"], "digest": index["metadata"]["image"]["digest"]}


def _push(root: Path, services: Services, repo: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "shipyard", "push", "--binary=meshctl", "--tag=t"],
        cwd=root,
        env={**os.environ, "CI": "1", "HUB": f"{services.registry}/{repo}"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith(f"{services.registry}/")]
    return line.split("@", 1)[1].split()[0]


def test_two_clones_with_bases_written_differently_push_one_digest(
    tmp_path: Path, services: Services
) -> None:
    assert services.base_layout, "scripts/services.sh writes the base layout"
    origin = copy_worktree(tmp_path / "origin")
    first = clone(origin, tmp_path / "first")
    second = clone(origin, tmp_path / "second")
    # The same image, written by two commands: a copy of the layout scripts/services.sh
    # made, and skopeo's oci: writer under another name (another index.json, the same
    # blobs).
    shutil.copytree(services.base_layout, first / BASE)
    (second / BASE).parent.mkdir(parents=True, exist_ok=True)
    source, target = f"oci:{services.base_layout}", f"oci:{second / BASE}:python"
    subprocess.run(["skopeo", "copy", "--quiet", "--all", source, target], check=True)
    assert (first / BASE / "index.json").read_bytes() != (second / BASE / "index.json").read_bytes()

    one = _build(first, tmp_path / "cache1")
    two = _build(second, tmp_path / "cache2")
    assert one["key"] != two["key"], "the base layouts differ, so the action keys do"
    assert one["digest"] == two["digest"]
    pushed = {_push(root, services, f"published-{root.name}") for root in (first, second)}
    assert pushed == {one["digest"]}

    # Another shipyard version: another key (it is part of every key), the same bytes.
    bumped = _build(first, tmp_path / "cache3", version="99.0.0")
    assert bumped["key"] != one["key"]
    assert bumped["digest"] == one["digest"]
