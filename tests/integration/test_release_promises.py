"""The README's release promises through the CLI (issue 18, items 5 and 6): a dry run
needs no package index (wheels are staged, not uploaded), a release with wheels and no
index stops in preflight, and a second snapshot into dist/release/<version>/ needs
--clean, which replaces the folder whole. No hub, no index: wheels and zipapps only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration._release import make_repo

pytestmark = [pytest.mark.integration]

MANIFEST = """\
schema: 1
project: {name: mesh, version: git, python: "3.11"}
defaults:
  outputs: [wheel, zipapp]
  platforms: [linux/amd64]
binaries:
  meshctl: {source: ctl, entrypoint: "meshctl.cli:main"}
"""


def shipyard(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m shipyard ARGS` in `repo` with no package index in the environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIPYARD_INDEX_")}
    env.update(CI="1", SHIPYARD_CACHE_DIR=str(repo.parent / "cache"))
    return subprocess.run(
        [sys.executable, "-m", "shipyard", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_a_dry_run_without_an_index_stages_wheels_and_exits_0(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", MANIFEST)
    done = shipyard(repo, "release", "--version=2.0.0", "--dry-run")
    assert done.returncode == 0, done.stderr
    folder = repo / "dist" / "release" / "2.0.0.dry-run"
    assert done.stdout.strip() == str(folder)
    for name in ("meshctl", "mesh_api"):
        wheel = f"{name}-2.0.0-py3-none-any.whl"
        assert (folder / "wheels" / wheel).is_file()
        assert f"would stage wheel {wheel} but not upload it: no package index is set" in (
            done.stderr
        )
    assert "2 wheel(s) staged in" in done.stderr
    assert "without --dry-run the release stops in preflight" in done.stderr
    assert "publish    ran" in done.stderr
    assert not (repo / "dist" / "release" / "2.0.0").exists()


def test_a_release_with_wheels_and_no_index_stops_before_building(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", MANIFEST)
    done = shipyard(repo, "release", "--version=2.0.0")
    assert done.returncode == 2, done.stderr
    assert "no package index is set" in done.stderr
    assert "--index-url" in done.stderr and "--dry-run" in done.stderr
    assert "Traceback" not in done.stderr
    assert not list((repo / "dist").rglob("*.whl"))
    assert not (repo / "dist" / "release").exists()


def _files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_a_second_snapshot_needs_clean_and_clean_replaces_the_folder(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", MANIFEST)
    first = shipyard(repo, "release", "--snapshot")
    assert first.returncode == 0, first.stderr
    folder = Path(first.stdout.strip())
    assert folder.parent == repo / "dist" / "release" and ".dev" in folder.name
    staged = _files(folder)
    (folder / "stray.txt").write_text("not part of any release\n")
    (folder / "wheels" / "stray-0.1-py3-none-any.whl").write_bytes(b"not staged")

    again = shipyard(repo, "release", "--snapshot")
    assert again.returncode == 2, again.stderr
    assert f"{folder} already exists" in again.stderr
    assert "--clean" in again.stderr
    assert "build      skipped" in again.stderr  # preflight: nothing was built
    assert (folder / "stray.txt").is_file()  # and nothing was touched

    clean = shipyard(repo, "release", "--snapshot", "--clean")
    assert clean.returncode == 0, clean.stderr
    assert _files(folder) == staged
    release = json.loads((folder / "release.json").read_text())
    listed = {a["path"] for a in release["artifacts"]}
    sums = {line.split("  ", 1)[1] for line in (folder / "SHA256SUMS").read_text().splitlines()}
    assert sums == _files(folder) - {"SHA256SUMS"}
    assert sums == listed | {"release.json", "CHANGELOG.md"}
    check = subprocess.run(
        ["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=folder, capture_output=True, check=False
    )
    assert check.returncode == 0
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]
