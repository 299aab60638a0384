"""git, run one way: `git -C ROOT ARGS`, never through a shell, output captured.

Every module that asks git something (the stamp, `--since`, the files a source is
made of, the workspace's pyproject.toml files, a release's changelog and tags) asks
through here. A git that cannot start (not installed) is None, never an exception:
each caller says what that means for it (no revision in the stamp, a walk instead of
git's list, an exit 2 naming --since).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["output", "run", "start"]


def start(root: Path, *args: str) -> subprocess.Popen[bytes] | None:
    """Start `git -C root ARGS` with its stdout piped and its stderr dropped, to read
    later (several questions asked side by side); None when git cannot start."""
    try:
        return subprocess.Popen(
            ["git", "-C", str(root), *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
    except OSError:
        return None


def run(root: Path, *args: str) -> subprocess.CompletedProcess[bytes] | None:
    """`git -C root ARGS` to its end, stdout and stderr captured; None when git cannot
    start."""
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=False)
    except OSError:
        return None


def output(root: Path, *args: str) -> bytes | None:
    """What `git -C root ARGS` printed when it succeeded, else None."""
    done = run(root, *args)
    return done.stdout if done is not None and done.returncode == 0 else None
