"""shipyard.workspace._discover: which pyproject.toml files are read, and uv workspace
members as uv finds them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shipyard.workspace import WorkspaceError, load_workspace
from tests.unit.workspace.test_projects import project, write


def test_in_a_git_work_tree_ignored_folders_are_not_projects(tmp_path: Path) -> None:
    project(tmp_path / "lib", "lib")
    project(tmp_path / "app", "app", ["lib"])
    project(tmp_path / "generated/lib", "lib")  # would be a duplicate if it were looked at
    write(tmp_path / ".gitignore", "/generated/\n")
    write(tmp_path / "notaproject/pyproject.toml", "[tool.ruff]\nline-length = 99\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    ws = load_workspace(tmp_path, strict=True)
    assert sorted(ws.projects) == ["app", "lib"]  # untracked but not ignored: found
    assert ws.projects["app"].in_repo == ("lib",)
    assert ws.project_at(tmp_path / "notaproject") is None


def test_member_globs_follow_uv(tmp_path: Path) -> None:
    write(
        tmp_path / "pyproject.toml",
        '[tool.uv.workspace]\nmembers = ["libs/*", "maybe/*"]\nexclude = ["libs/old"]\n',
    )
    project(tmp_path / "libs/a", "a")
    write(tmp_path / "libs/old/README", "no pyproject here, but excluded")
    (tmp_path / "libs/empty").mkdir()  # uv skips a folder with no files
    (tmp_path / "libs/.hidden").mkdir()
    write(tmp_path / "libs/.hidden/x", "hidden folders are skipped too")
    ws = load_workspace(tmp_path, strict=True)  # `maybe/*` matches nothing: fine for uv
    assert ws.members == ("a",)
    write(tmp_path / "libs/b/README", "a member without pyproject.toml")
    with pytest.raises(WorkspaceError, match=r"`libs/b` is missing a `pyproject.toml`") as e:
        load_workspace(tmp_path)
    assert (e.value.where.line, e.value.where.col) == (2, 12)
