"""A fresh repository with this working tree's files, as a clean clone would have."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


# Same files, same commit: two copies get the same revision, version and clock.
_FIXED = {
    **os.environ,
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}


def copy_worktree(target: Path) -> Path:
    """Copy the tracked and untracked-but-not-ignored files into `target` and commit."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.email=t@t.invalid", "-c", "user.name=t", "commit", "-qm", "x"],
    ):
        subprocess.run(
            ["git", "-C", str(target), *args], check=True, capture_output=True, env=_FIXED
        )
    return target


def shipyard(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m shipyard ARGS` in `cwd` as CI would (plain output)."""
    return subprocess.run(
        [sys.executable, "-m", "shipyard", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "CI": "1", **env},
    )


def clone(source: Path, target: Path) -> Path:
    """A clone of a copy made by copy_worktree: the same commit, its own work tree."""
    subprocess.run(["git", "clone", "-q", str(source), str(target)], check=True)
    return target
