"""git's answers for --since: the files changed since a commit, and a file as it was."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shipyard.engine.changes import changed_files, changes, file_at
from shipyard.errors import UsageError

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid"]


def _repo(root: Path) -> str:
    root.mkdir()
    (root / ".gitignore").write_text("*.log\n")
    (root / "a.txt").write_text("one\n")
    subprocess.run([*GIT, "-C", str(root), "init", "-q"], check=True)
    subprocess.run([*GIT, "-C", str(root), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(root), "commit", "-qm", "x"], check=True)
    done = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_changes_name_the_commit_and_the_files_git_does_not_ignore(tmp_path: Path) -> None:
    sha = _repo(tmp_path / "repo")
    (tmp_path / "repo" / "a.txt").write_text("two\n")
    (tmp_path / "repo" / "new.txt").write_text("new\n")
    (tmp_path / "repo" / "debug.log").write_text("ignored\n")
    assert changes(tmp_path / "repo", "HEAD") == (sha, ("a.txt", "new.txt"))
    assert changed_files(tmp_path / "repo", "HEAD") == ("a.txt", "new.txt")
    assert file_at(tmp_path / "repo", sha, "a.txt") == b"one\n"
    assert file_at(tmp_path / "repo", sha, "new.txt") is None


def test_a_ref_that_names_no_commit_is_a_usage_error(tmp_path: Path) -> None:
    _repo(tmp_path / "repo")
    with pytest.raises(UsageError, match="--since=nope: not a commit in this repository"):
        changes(tmp_path / "repo", "nope")
    with pytest.raises(UsageError, match="not a commit; give a branch"):
        changes(tmp_path / "repo", "--all")
