"""Which projects hold others (and so get no detected stages), found in one pass."""

from __future__ import annotations

from pathlib import Path

from shipyard.stages._settings import holders
from shipyard.workspace import load_workspace


def _project(folder: Path, name: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(f'[project]\nname = "{name}"\nversion = "1"\n')


def test_only_a_project_with_another_in_its_folder_holds(tmp_path: Path) -> None:
    _project(tmp_path, "root")
    _project(tmp_path / "apps/tool", "tool")
    _project(tmp_path / "apps/tool/plugins/extra", "extra")  # held by tool, and by root
    _project(tmp_path / "apps/toolbox", "toolbox")  # a sibling whose name starts alike
    _project(tmp_path / "libs/core", "core")
    workspace = load_workspace(tmp_path)
    roots = {p.name: p.root for p in workspace.projects.values()}
    assert set(roots) == {"root", "tool", "extra", "toolbox", "core"}
    assert holders(workspace) == {roots["root"], roots["tool"]}
