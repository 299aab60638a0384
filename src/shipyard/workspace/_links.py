"""Which requirements of a project name projects of the repository.

A requirement is in-repo when `[tool.uv.sources]` (the project's own over its uv
workspace root's) says `workspace = true` or `path = ...` to a project's folder, or, with
no source entry, when a project of the repository has that name; a git, url or index
source, or a path to a wheel or sdist, is third-party whatever the name. A project of the
repository named in `[build-system].requires` is a problem: an isolated build would take
it from the index. Problems are recorded on the `Scan`, against the requiring project.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from shipyard.workspace import _markers
from shipyard.workspace._discover import UvWorkspace, rel
from shipyard.workspace._scan import Scan
from shipyard.workspace._text import Where, WorkspaceError
from shipyard.workspace.projects import Dependency, Link

__all__ = ["Source", "build_requirements", "link", "sources"]


@dataclass(frozen=True)
class Source:
    """A `[tool.uv.sources]` entry: its kind, its path if local, and where it is written."""

    kind: str  # workspace, path, git, url, index, other
    path: Path | None
    where: Where


def sources(scan: Scan, folder: Path, ws: UvWorkspace | None) -> dict[str, Source]:
    """The project's `[tool.uv.sources]` over its workspace root's, by canonical name."""
    merged: dict[str, Source] = {}
    owners = [scan.files[folder]]
    if ws is not None and ws.root != folder:
        owners.insert(0, ws.file)
    for file in owners:
        table = file.data.get("tool", {}).get("uv", {}).get("sources", {})
        if not isinstance(table, dict):
            continue
        for raw, value in table.items():
            entry = value[0] if isinstance(value, list) and value else value
            if not isinstance(entry, dict):
                continue
            where = file.where(
                ("tool", "uv", "sources", raw), ("tool", "uv", "sources"), root=scan.root,
                key=True,
            )  # fmt: skip
            path = None
            if entry.get("workspace") is True:
                kind = "workspace"
            elif isinstance(entry.get("path"), str):
                kind, path = "path", Path(os.path.normpath(file.path.parent / entry["path"]))
            else:
                kind = next((k for k in ("git", "url", "index") if k in entry), "other")
            merged[canonicalize_name(raw)] = Source(kind, path, where)
    return merged


def link(
    scan: Scan,
    folder: Path,
    key: str,
    text: object,
    where: Where,
    sources: dict[str, Source],
    ws: UvWorkspace | None,
) -> tuple[Dependency, Link | None] | None:
    """Requirement `text` of project `key`, written at `where`, with its link when it
    names a project of the repository (`key` itself included: an extra may ask for the
    project's other extras). None, with a problem recorded, when it is not PEP 508."""
    try:
        requirement = Requirement(text)  # type: ignore[arg-type]  # TypeError if not str
    except (InvalidRequirement, TypeError) as error:
        scan.problem(
            folder,
            WorkspaceError(where, f"invalid requirement {text!r}: {error}", "write it as PEP 508"),
        )
        return None
    dependency = Dependency(requirement, where)
    dep = canonicalize_name(requirement.name)
    extras = tuple(sorted({canonicalize_name(e) for e in requirement.extras}))
    if dep == key:
        return dependency, Link(key, extras, where)
    target = _resolve(scan, folder, dep, where, sources.get(dep), ws)
    if target is not None:
        return dependency, Link(target, extras, where)
    in_lock = scan.lock is not None and (
        (ws is not None and ws.root == scan.root) or folder == scan.root
    )
    if (
        in_lock
        and scan.lock is not None
        and dep not in scan.lock.packages
        and not _markers.never(requirement.marker, scan.lock.requires_python)
    ):
        scan.problem(
            folder,
            WorkspaceError(
                where,
                f"`{requirement.name}` is neither a project of the repository nor a "
                "package of uv.lock",
                "run `uv lock` (or fix the name)",
            ),
        )
    return dependency, None


def _resolve(
    scan: Scan,
    folder: Path,
    dep: str,
    where: Where,
    source: Source | None,
    ws: UvWorkspace | None,
) -> str | None:
    """The key of the in-repo project requirement `dep` names, or None (third-party)."""
    if source is None:
        return _by_name(scan, folder, dep, where)
    if source.kind == "workspace":
        return _workspace_member(scan, folder, dep, where, source, ws)
    if source.kind == "path" and source.path is not None:
        return _path_target(scan, folder, dep, source, source.path)
    return None


def _by_name(scan: Scan, folder: Path, dep: str, where: Where) -> str | None:
    """`dep` with no source entry: in-repo when exactly one project has that name."""
    folders = scan.by_key.get(dep, [])
    if len(folders) > 1:
        places = ", ".join(rel(scan.files[f].path, scan.root) for f in folders)
        scan.problem(
            folder,
            WorkspaceError(
                where,
                f"`{dep}` could be any of {len(folders)} projects: {places}",
                "rename one of them, or point at one with a `path` source in [tool.uv.sources]",
            ),
        )
        return None
    return dep if folders else None


def _workspace_member(
    scan: Scan, folder: Path, dep: str, where: Where, source: Source, ws: UvWorkspace | None
) -> str | None:
    """`dep` with `workspace = true`: a member of the requiring project's uv workspace."""
    members = ws.members if ws is not None else set()
    if any(scan.names.get(m, ("", ""))[1] == dep for m in members):
        return dep
    home = rel(ws.file.path, scan.root) if ws is not None else "no workspace"
    scan.problem(
        folder,
        WorkspaceError(
            where,
            f"`{dep}` has `workspace = true` in [tool.uv.sources] ({source.where}) "
            f"but is not a member of the workspace ({home})",
            "add its folder to [tool.uv.workspace] members, or use a `path` source",
        ),
    )
    return None


def _path_target(scan: Scan, folder: Path, dep: str, source: Source, target: Path) -> str | None:
    """`dep` with a `path` source: the project of that name at `target`, or None for an
    archive (third-party) or, with a problem recorded, for anything else."""
    if target.is_file():
        return None  # a wheel or sdist: a third-party artifact
    if target in scan.broken:
        scan.problem(folder, scan.broken[target])
        return None
    if target not in scan.names:
        outside = not target.is_relative_to(scan.root)
        scan.problem(
            folder,
            WorkspaceError(
                source.where,
                f"no pyproject.toml at {rel(target, scan.root)} (the path source of "
                f"`{dep}`)" + (", which is outside the repository" if outside else ""),
                "point the path at a folder of the repository with a pyproject.toml",
            ),
        )
        return None
    found = scan.names[target][1]
    if found != dep:
        scan.problem(
            folder,
            WorkspaceError(
                source.where,
                f"the path source of `{dep}` is the project `{found}`",
                "point it at the folder of the project with that name",
            ),
        )
        return None
    return dep  # a name two projects share is raised when `closure` reaches it


def build_requirements(scan: Scan, folder: Path) -> None:
    """Record a problem for each `[build-system].requires` entry naming a project of
    the repository: the wheel build installs build requirements in an isolated
    environment from the index, where anyone may publish that name."""
    file = scan.files[folder]
    table = file.data.get("build-system")
    listed = table.get("requires") if isinstance(table, dict) else None
    for index, text in enumerate(listed if isinstance(listed, list) else []):
        try:
            requirement = Requirement(text)
        except (InvalidRequirement, TypeError):
            continue  # not ours to judge: the build front end says what is wrong
        owners = scan.by_key.get(canonicalize_name(requirement.name))
        if not owners:
            continue
        path: tuple[str | int, ...] = ("build-system", "requires", index)
        where = file.where(path, path[:-1], ("build-system",), root=scan.root)
        scan.problem(
            folder,
            WorkspaceError(
                where,
                f"[build-system].requires names `{requirement.name}` "
                f"(`{canonicalize_name(requirement.name)}`), a project of the repository "
                f"({rel(scan.files[owners[0]].path, scan.root)}): shipyard builds each "
                "wheel in an isolated environment from the index, so an in-repo build "
                "requirement would come from the index, as whoever published that name "
                "there made it, and run during the build",
                "vendor it in this project's tree and name its folder in [build-system] "
                "backend-path, or publish it to your index under a name no project of "
                "the repository has",
            ),
        )
