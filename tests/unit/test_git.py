"""shipyard.git: the one way git is run (issue 27)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shipyard import git


def test_output_run_and_start_ask_the_repository_given(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.txt").write_text("a\n")
    assert git.output(tmp_path, "rev-parse", "--is-inside-work-tree") == b"true\n"
    assert git.output(tmp_path, "rev-parse", "--verify", "HEAD") is None  # no commit yet
    done = git.run(tmp_path, "rev-parse", "--verify", "HEAD")
    assert done is not None and done.returncode != 0 and done.stderr
    process = git.start(tmp_path, "ls-files", "-z", "--others")
    assert process is not None and process.communicate()[0] == b"a.txt\0"


def test_a_git_that_cannot_start_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no git there
    assert git.run(tmp_path, "status") is None
    assert git.output(tmp_path, "status") is None
    assert git.start(tmp_path, "status") is None
