"""shipyard.workspace.projects: closure and dependents, owners, problems raised on asking."""

from __future__ import annotations

from pathlib import Path

import pytest

from shipyard.errors import UsageError
from shipyard.workspace import WorkspaceError, load_workspace


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
