"""Finding the pyproject.toml files of a repository and the members of its uv workspaces.

Members follow uv 0.13: a glob matching nothing is fine, a hidden or empty folder is
skipped, a folder with files but no pyproject.toml is an error. Unlike uv, a plain member
path that does not exist is an error too: it is a library deleted or misspelt.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from shipyard import _toml, git
from shipyard.workspace._text import TomlFile, Where, WorkspaceError

__all__ = ["UvWorkspace", "read_pyprojects", "rel", "uv_workspace"]

# Folders a walk never enters when the root is not a git work tree.
_SKIP = frozenset(
    {".git", ".venv", "venv", "node_modules", "__pycache__", ".nox", ".tox", "dist", "build",
     ".shipyard"}
)  # fmt: skip
_GLOB_CHARS = re.compile(r"[*?\[]")
_TOML_PLACE = re.compile(r"\(at line (\d+), column (\d+)\)")


@dataclass
class UvWorkspace:
    """A `[tool.uv.workspace]`: its root folder, member folders and sources."""

    root: Path
    file: TomlFile
    members: set[Path]
    problems: list[WorkspaceError]


def _git_pyprojects(root: Path) -> list[Path] | None:
    listed = git.output(
        root, "ls-files", "-z", "-co", "--exclude-standard", "--", "*pyproject.toml"
    )
    if listed is None:
        return None
    names = {n for n in os.fsdecode(listed).split("\0") if n}
    return [root / n for n in sorted(names) if n.rsplit("/", 1)[-1] == "pyproject.toml"]


def _walk_pyprojects(root: Path) -> list[Path]:
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP and not d.endswith(".egg-info"))
        if "pyproject.toml" in names:
            found.append(Path(folder) / "pyproject.toml")
    return found


def _toml_error(path: Path, error: Exception, root: Path) -> WorkspaceError:
    place = _TOML_PLACE.search(str(error))
    line, col = (int(place[1]), int(place[2])) if place else (1, 1)
    problem = _TOML_PLACE.sub("", str(error)).strip()
    return WorkspaceError(
        Where(path, line, col, root),
        f"{path.name} is not valid TOML: {problem}",
        "fix the syntax at that place",
    )


def read_pyprojects(root: Path) -> tuple[dict[Path, TomlFile], dict[Path, WorkspaceError]]:
    listed = _git_pyprojects(root)
    paths = listed if listed is not None else _walk_pyprojects(root)
    files: dict[Path, TomlFile] = {}
    broken: dict[Path, WorkspaceError] = {}
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            if path.is_file():  # listed by git but deleted from the work tree: not there
                broken[path.parent] = WorkspaceError(
                    Where(path, 1, 1, root), f"cannot read {path.name}: {error}", "fix the file"
                )
            continue
        try:
            data = _toml.loads(text)
        except tomllib.TOMLDecodeError as error:
            if path.parent == root:
                raise _toml_error(path, error, root) from None
            broken[path.parent] = _toml_error(path, error, root)
            continue
        files[path.parent] = TomlFile(path, data, text)
    return files, broken


def uv_workspace(
    folder: Path,
    file: TomlFile,
    files: Mapping[Path, TomlFile],
    broken: Mapping[Path, WorkspaceError],
    root: Path,
) -> UvWorkspace:
    """The member folders of the `[tool.uv.workspace]` in `folder`, as uv 0.13 finds them."""
    config = file.data["tool"]["uv"]["workspace"]
    ws = UvWorkspace(folder, file, set(), [])
    if "project" in file.data:
        ws.members.add(folder)
    excluded: set[Path] = set()
    for pattern in config.get("exclude", []) or []:
        if isinstance(pattern, str):
            excluded |= _glob(folder, pattern)
    members = config.get("members", []) or []
    for index, pattern in enumerate(members):
        where = file.where(
            ("tool", "uv", "workspace", "members", index), ("tool", "uv", "workspace"),
            root=root,
        )  # fmt: skip
        if not isinstance(pattern, str):
            ws.problems.append(WorkspaceError(where, "a member must be a string", "quote it"))
            continue
        matches = _glob(folder, pattern)
        if not matches and not _GLOB_CHARS.search(pattern):
            # uv 0.13 ignores a member that matches nothing; a plain folder name that is
            # not there is a library deleted or misspelt, so shipyard says so.
            ws.problems.append(
                WorkspaceError(
                    where,
                    f"workspace member `{pattern}` does not exist",
                    "create the folder with a pyproject.toml, or remove it from "
                    "[tool.uv.workspace] members",
                )
            )
        for member in sorted(matches - excluded):
            _add_member(ws, member, pattern, where, files, broken)
    return ws


def _add_member(
    ws: UvWorkspace,
    member: Path,
    pattern: str,
    where: Where,
    files: Mapping[Path, TomlFile],
    broken: Mapping[Path, WorkspaceError],
) -> None:
    """Add folder `member` (matched by `pattern`, written at `where`) to `ws`: as a
    member when it is a project, else as a problem, unless uv would skip it too (a
    hidden folder, or one without files)."""
    folder = ws.root
    if member in files:
        if "project" not in files[member].data:
            ws.problems.append(
                WorkspaceError(
                    where,
                    f"workspace member `{rel(member, folder)}` has no [project] table "
                    f"in its pyproject.toml",
                    "add a [project] table with a name, or remove the member",
                )
            )
            return
        ws.members.add(member)
    elif member in broken:
        ws.problems.append(broken[member])
    elif not member.name.startswith(".") and _has_files(member):
        ws.problems.append(
            WorkspaceError(
                where,
                f"workspace member `{rel(member, folder)}` is missing a "
                f"`pyproject.toml` (matches: `{pattern}`)",
                "add a pyproject.toml to that folder, or exclude it with "
                "[tool.uv.workspace] exclude",
            )
        )


def _glob(folder: Path, pattern: str) -> set[Path]:
    try:
        return {Path(os.path.normpath(p)) for p in folder.glob(pattern) if p.is_dir()}
    except (ValueError, NotImplementedError):
        return set()


def _has_files(folder: Path) -> bool:
    """Whether `folder` holds a file uv would not skip (caches do not count)."""
    for _, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        if any(not n.endswith((".pyc", ".pyo")) for n in names):
            return True
    return False


def rel(path: Path, base: Path) -> str:
    return path.relative_to(base).as_posix() if path.is_relative_to(base) else str(path)
