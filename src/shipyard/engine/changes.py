"""Which files changed since a commit, and what a file held then: git's answers for `--since`.

Changed files are `SINCE` against the working tree, committed or not, plus untracked
files git does not ignore; a move counts as its deletion and its addition. Every
failure is a UsageError (exit 2) naming --since and the fix.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from shipyard import git
from shipyard.errors import UsageError

__all__ = ["changed_files", "changes", "file_at"]


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    done = git.run(root, *args)
    if done is None:
        raise UsageError("--since needs git, which could not run; install git or drop --since")
    return done


def _commit(root: Path, since: str) -> str:
    """The commit `since` names, checked; UsageError naming --since and the fix."""
    done = _git(root, "rev-parse", "--is-inside-work-tree")
    if done.returncode != 0 or done.stdout.strip() != b"true":
        raise UsageError(
            f"--since={since}: {root} is not a git work tree; "
            "run in a git checkout, or drop --since"
        )
    if since.startswith("-") or not since.strip():
        raise UsageError(f"--since={since!r}: not a commit; give a branch, tag or commit")
    done = _git(root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{since}^{{commit}}")
    if done.returncode != 0:
        raise UsageError(
            f"--since={since}: not a commit in this repository; give a branch, tag or commit "
            "(fetch it first, e.g. `git fetch origin main`; in CI, check out with full "
            "history, e.g. fetch-depth: 0)"
        )
    return done.stdout.decode().strip()


def _names(output: bytes) -> list[str]:
    return [os.fsdecode(n) for n in output.split(b"\0") if n]


def changes(root: Path, since: str) -> tuple[str, tuple[str, ...]]:
    """The commit `since` names, and the files changed between it and the working tree
    (relative to `root`, sorted)."""
    sha = _commit(root, since)
    files: set[str] = set()
    for args in (
        ("diff", "--name-only", "--no-renames", "--no-ext-diff", "--relative", "-z", sha, "--"),
        ("ls-files", "-z", "--others", "--exclude-standard"),
    ):
        done = _git(root, *args)
        if done.returncode != 0:
            message = done.stderr.decode(errors="replace").strip()
            raise UsageError(f"--since={since}: git {args[0]} failed: {message}")
        files.update(_names(done.stdout))
    return sha, tuple(sorted(files))


def changed_files(root: Path, since: str) -> tuple[str, ...]:
    """Files changed between commit `since` and the working tree, relative to `root`, sorted.

    Committed and uncommitted changes both count, and untracked files git does
    not ignore; a move counts as its deletion and its addition. UsageError (exit 2)
    when `since` is not a commit or `root` is not in a git work tree.
    """
    return changes(root, since)[1]


def file_at(root: Path, sha: str, rel: str) -> bytes | None:
    """The file `rel` (relative to `root`) as commit `sha` has it; None when it had none."""
    done = _git(root, "show", f"{sha}:./{rel}")
    return done.stdout if done.returncode == 0 else None
