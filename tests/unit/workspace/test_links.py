"""shipyard.workspace._links: which requirements are in-repo (uv workspace and path
sources, plain names), and where each is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from shipyard.workspace import Where, load_workspace
from tests.unit._workspaces import Uv, needs_uv, standard_index, uv_workspace
from tests.unit.workspace.test_projects import project, write


def text_at(where: Where) -> str:
    line = where.path.read_text().splitlines()[where.line - 1]
    return line[where.col - 1 :]


@pytest.fixture(scope="module")
def uv(tmp_path_factory: pytest.TempPathFactory) -> Uv:
    folder = tmp_path_factory.mktemp("uv")
    return Uv(standard_index(folder / "index"), folder / "cache")


@needs_uv
def test_a_uv_workspace_links_members_through_workspace_sources(tmp_path: Path, uv: Uv) -> None:
    root = uv_workspace(tmp_path / "repo", uv)
    ws = load_workspace(root)
    assert sorted(ws.projects) == ["acme-common", "acme-tool"]
    assert ws.members == ("acme-common", "acme-tool")
    tool = ws.projects["acme-tool"]
    assert tool.in_repo == ("acme-common",)
    assert tool.root == root / "apps/tool" and tool.pyproject == root / "apps/tool/pyproject.toml"
    assert [d.requirement.name for d in tool.dependencies] == ["acme-common", "alpha", "delta"]
    # Each requirement's place is its quoted string in the file uv wrote.
    for dep in tool.dependencies:
        assert text_at(dep.where).startswith(f'"{dep.requirement.name}')
    assert str(tool.dependencies[0].where).startswith("apps/tool/pyproject.toml:")
    assert ws.projects["acme-common"].in_repo == ()
    assert ws.closure("acme-tool") == (ws.projects["acme-common"],)
    assert ws.dependents("acme-common") == ("acme-tool",)
    assert ws.lock is not None and "acme-tool" in ws.lock.members


def test_without_uv_configuration_a_matching_name_is_in_repo(tmp_path: Path) -> None:
    project(tmp_path / "libs/Acme_Util", "Acme_Util", ["requests>=2"])
    project(tmp_path / "apps/app", "app", ["acme-util[extra]>=1; python_version >= '3.8'", "rich"])
    # Never entered by the walk of a folder that is not a git work tree.
    project(tmp_path / ".venv/lib/site/x", "acme-util")
    project(tmp_path / "node_modules/y", "app")
    ws = load_workspace(tmp_path, strict=True)
    assert sorted(ws.projects) == ["acme-util", "app"]
    assert ws.projects["acme-util"].name == "Acme_Util"
    assert ws.projects["app"].in_repo == ("acme-util",)
    assert ws.members == () and ws.lock is None


def test_path_sources_link_folders_and_leave_archives_third_party(tmp_path: Path) -> None:
    project(tmp_path / "vendor/helper", "helper-lib")
    write(tmp_path / "wheels/pinned-1.0-py3-none-any.whl", "not read")
    project(
        tmp_path / "apps/app",
        "app",
        ["helper-lib", "pinned"],
        '\n[tool.uv.sources]\nhelper-lib = { path = "../../vendor/helper", editable = true }\n'
        'pinned = { path = "../../wheels/pinned-1.0-py3-none-any.whl" }\n',
    )
    ws = load_workspace(tmp_path, strict=True)
    assert ws.projects["app"].in_repo == ("helper-lib",)


def test_git_and_url_sources_are_third_party_even_when_the_name_matches(tmp_path: Path) -> None:
    project(tmp_path / "lib", "lib")
    project(
        tmp_path / "app",
        "app",
        ["lib"],
        '\n[tool.uv.sources]\nlib = { git = "file:///nowhere/lib", tag = "v1" }\n',
    )
    assert load_workspace(tmp_path, strict=True).projects["app"].in_repo == ()


def test_root_sources_apply_to_members_as_uv_applies_them(tmp_path: Path) -> None:
    write(
        tmp_path / "pyproject.toml",
        '[tool.uv.workspace]\nmembers = ["packages/*"]\n\n'
        "[tool.uv.sources]\ncore = { workspace = true }\n",
    )
    project(tmp_path / "packages/core", "core")
    project(tmp_path / "packages/app", "app", ["core"])
    ws = load_workspace(tmp_path, strict=True)
    assert ws.projects["app"].in_repo == ("core",)
    assert ws.members == ("app", "core")
