"""shipyard.workspace.projects: discovery, in-repo edges, closure/dependents, positions."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from shipyard.errors import UsageError
from shipyard.workspace import Where, WorkspaceError, load_workspace
from shipyard.workspace._text import Positions
from tests.unit._workspaces import Uv, needs_uv, standard_index, uv_workspace


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def project(folder: Path, name: str, deps: list[str] = (), extra: str = "") -> Path:  # type: ignore[assignment]
    """A hand-written pyproject.toml, one requirement a line as people write them."""
    lines = "".join(f'    "{d}",\n' for d in deps)
    return write(
        folder / "pyproject.toml",
        f'[project]\nname = "{name}"\nversion = "1.0"\ndependencies = [\n{lines}]\n{extra}',
    )


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


def diamond(tmp_path: Path) -> None:
    project(tmp_path / "a", "a", ["c", "b"])
    project(tmp_path / "b", "b", ["d"])
    project(tmp_path / "c", "c", ["d", "e"])
    project(tmp_path / "d", "d", ["e"])
    project(tmp_path / "e", "e")
    project(tmp_path / "f", "f", ["e"])


def test_closure_is_dependencies_first_with_ties_by_key(tmp_path: Path) -> None:
    diamond(tmp_path)
    ws = load_workspace(tmp_path, strict=True)
    assert [p.key for p in ws.closure("a")] == ["e", "d", "b", "c"]
    assert [p.key for p in ws.closure("c")] == ["e", "d"]
    assert ws.closure("e") == ()
    assert ws.closure("a") is ws.closure("a")  # memoised
    assert ws.dependents("e") == ("a", "b", "c", "d", "f")
    assert ws.dependents("d") == ("a", "b", "c")
    assert ws.dependents("a") == ()
    with pytest.raises(KeyError):
        ws.closure("zz")


def test_owner_and_project_at(tmp_path: Path) -> None:
    project(tmp_path, "outer")
    project(tmp_path / "libs/inner", "inner")
    ws = load_workspace(tmp_path, strict=True)
    assert ws.owner(tmp_path / "libs/inner/src/inner/x.py") is ws.projects["inner"]
    assert ws.owner(Path("libs/inner")) is ws.projects["inner"]
    assert ws.owner(Path("libs/other.py")) is ws.projects["outer"]
    assert ws.owner(tmp_path.parent / "elsewhere.py") is None
    assert ws.project_at(Path("libs")) is None
    assert ws.project_at(tmp_path / "libs/inner") is ws.projects["inner"]


def test_a_broken_project_fails_only_what_uses_it(tmp_path: Path) -> None:
    """Test fixtures broken on purpose live in real repositories: they must not stop the
    build of the projects that do not use them."""
    project(tmp_path / "fixtures/x", "twin")
    project(tmp_path / "fixtures/y", "twin")
    project(tmp_path / "fixtures/loop-a", "loop-a", ["loop-b"])
    project(tmp_path / "fixtures/loop-b", "loop-b", ["loop-a"])
    write(tmp_path / "fixtures/bad/pyproject.toml", "[project\nname = 'x'\n")
    project(tmp_path / "app", "app", ["lib"])
    project(tmp_path / "lib", "lib")
    ws = load_workspace(tmp_path)
    assert [p.key for p in ws.closure("app")] == ["lib"]
    with pytest.raises(WorkspaceError, match="two projects are named `twin`"):
        ws.closure("twin")
    with pytest.raises(WorkspaceError, match="dependency cycle: loop-a -> loop-b -> loop-a"):
        ws.check("loop-a")
    with pytest.raises(WorkspaceError, match="not valid TOML") as bad:
        ws.project_at(tmp_path / "fixtures/bad")
    assert str(bad.value.where) == "fixtures/bad/pyproject.toml:1:9"
    with pytest.raises(WorkspaceError):
        load_workspace(tmp_path, strict=True)


def test_a_workspace_error_is_a_usage_error_naming_the_place(tmp_path: Path) -> None:
    project(tmp_path / "a", "a", ["b"])
    project(tmp_path / "b", "b", ["a"])
    with pytest.raises(WorkspaceError) as caught:
        load_workspace(tmp_path, strict=True)
    error = caught.value
    assert isinstance(error, UsageError) and error.exit_code == 2
    assert str(error) == (
        "b/pyproject.toml:5:5: dependency cycle: a -> b -> a; "
        "remove one of the links: a project cannot depend on itself through others"
    )


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


def test_positions_of_keys_and_values_in_hand_written_toml() -> None:
    text = (
        "# comment [not.a.table]\n"
        "[project]\n"
        'name = "x"  # "quoted" in a comment\n'
        'description = """multi\n[fake]\nline"""\n'
        "dependencies = [ 'a', # one\n"
        '  "b>=1; python_version < \\"3.12\\"",\n'
        '  ["nested"], {k = 1}, 1979-05-27 07:32:00, "c" ]\n'
        "optional-dependencies.extra = ['d']\n"
        '\n[[tool.things]]\nx = 1\n[[tool.things]]\n"quoted.key" = { a.b = [1, 2] }\n'
    )
    positions = Positions(text)
    assert positions.find(("project",)) == (2, 1)
    assert positions.find(("project", "dependencies", 0)) == (7, 18)
    assert positions.find(("project", "dependencies", 1)) == (8, 3)
    assert positions.find(("project", "dependencies", 5)) == (9, 45)
    assert positions.find(("project", "optional-dependencies", "extra", 0)) == (10, 32)
    assert positions.find(("tool", "things", 1, "quoted.key", "a", "b", 1)) == (15, 28)
    assert positions.find(("tool", "things", 1)) == (14, 1)
    assert positions.find(("nothing",)) == (1, 1)


def test_a_thousand_projects_load_fast(tmp_path: Path) -> None:
    count = 1000
    for i in range(count):
        deps = [f"pkg-{(i * 7 + k * 13) % count:04d}" for k in range(1 + i % 3) if i > 0]
        deps = [d for d in deps if d < f"pkg-{i:04d}"]  # only older ones: no cycles
        project(tmp_path / f"pkgs/p{i:04d}", f"pkg-{i:04d}", [*deps, "requests>=2"])
    started = time.perf_counter()
    ws = load_workspace(tmp_path)
    loaded = time.perf_counter() - started
    for key in ws.projects:
        ws.closure(key)
    ws.dependents("pkg-0000")
    total = time.perf_counter() - started
    print(
        f"\nload_workspace of {count} projects: {loaded:.3f} s; with every closure: {total:.3f} s"
    )
    assert len(ws.projects) == count
    assert loaded < 2.0
