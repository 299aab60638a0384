"""Loading a repository's workspace: every project, its requirements and in-repo links.

`load_workspace` reads the pyproject.toml files under the root and uv.lock, turns each
`[project]` table into a `Project` (its requirements static in the file, or dynamic:
see `_dynamic`), links those naming projects of the repository (`_links`) and settles
which project a name two folders share means. Problems of the root's own uv workspace
are raised here; those of one project are recorded for the `Workspace` to raise when
that project is asked about.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name

from shipyard.workspace._discover import read_pyprojects, uv_workspace
from shipyard.workspace._dynamic import (
    REQUIREMENTS,
    Listed,
    backend_metadata,
    dynamic_requirements,
)
from shipyard.workspace._links import build_requirements, link, sources
from shipyard.workspace._scan import Scan
from shipyard.workspace._text import WorkspaceError
from shipyard.workspace.lock import Lock
from shipyard.workspace.projects import Dependency, Link, Project, Workspace

if TYPE_CHECKING:
    from shipyard.files.statcache import StatMemo

__all__ = ["load_workspace"]


def load_workspace(
    root: Path,
    *,
    strict: bool = False,
    cache_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    memo: StatMemo | None = None,
) -> Workspace:
    """Discover the projects under `root` (the repository root) and read `root/uv.lock`.

    A project whose `[project].dynamic` names its dependencies or extras gets them from
    uv.lock when the lock records it (a member of the root's workspace), else from its
    PEP 517 backend, run in `env` (default: this process's environment) and cached
    under `cache_dir` by the hash of the project's files (`memo` remembers those hashes
    by stat facts). Raises a WorkspaceError for a problem of the root's own uv workspace
    (its members) or of uv.lock; with `strict`, for the first problem of any project as
    well."""
    root = root.resolve()
    files, broken = read_pyprojects(root)
    lock_path = root / "uv.lock"
    lock = Lock.load(lock_path) if lock_path.is_file() else None
    workspaces = {
        folder: uv_workspace(folder, file, files, broken, root)
        for folder, file in sorted(files.items())
        if isinstance(file.data.get("tool", {}).get("uv", {}).get("workspace"), dict)
    }
    if root in workspaces and workspaces[root].problems:
        raise workspaces[root].problems[0]
    scan = Scan(root, files, broken, workspaces, lock)
    scan.core = backend_metadata(scan, cache_dir, env, memo)
    return _build(scan, strict)


def _build(scan: Scan, strict: bool) -> Workspace:
    """The workspace of every project `scan` found; with `strict`, checked whole."""
    projects: dict[Path, Project] = {}
    for folder, (name, key) in sorted(scan.names.items()):
        projects[folder] = _project(scan, folder, name, key)
    for folder in sorted(scan.files):  # a source without [project] (setup.py) too
        build_requirements(scan, folder)
    unique, duplicates = _settle_names(scan, projects)
    for ws in scan.workspaces.values():
        for member in ws.members:
            for error in ws.problems:
                scan.problem(member, error)
    root_ws = scan.workspaces.get(scan.root)
    if root_ws is not None:
        members = tuple(sorted(scan.names[m][1] for m in root_ws.members))
    else:
        members = (scan.names[scan.root][1],) if scan.root in scan.names else ()
    workspace = Workspace(
        root=scan.root,
        projects=unique,
        lock=scan.lock,
        duplicates=duplicates,
        members=members,
        _by_folder=dict(projects),
        _problems=scan.problems,
        _broken=dict(scan.broken),
        _files=scan.files,
        _source_kinds=scan.source_kinds,
    )
    if strict:
        workspace.check_all()
    return workspace


def _settle_names(
    scan: Scan, projects: dict[Path, Project]
) -> tuple[dict[str, Project], dict[str, tuple[Project, ...]]]:
    """The project each name means, and the names several projects share (each copy
    with the problem recorded first, so it is what a build of it reports)."""
    unique = {}
    duplicates = {}
    for key, folders in scan.by_key.items():
        if len(folders) == 1:
            unique[key] = projects[folders[0]]
            continue
        # One of them in a uv workspace (a member, or a workspace's root) is the one
        # the name means, as uv sees it: a copy elsewhere (a test fixture, a vendored
        # tree) shadows nothing and is no error.
        housed = [f for f in folders if f in scan.workspaces or scan.workspace_of(f)]
        if len(housed) == 1:
            unique[key] = projects[housed[0]]
            continue
        duplicates[key] = tuple(projects[f] for f in folders)
        # Each copy names the first other one: the second folder for the first, else
        # the first (test fixtures may share one name dozens of times).
        firsts = [
            str(scan.files[folders[i]].where(("project", "name"), root=scan.root)) for i in (0, 1)
        ]
        more = f" and {len(folders) - 2} more" if len(folders) > 2 else ""
        for index, f in enumerate(folders):
            named = firsts[1 if index == 0 else 0]
            scan.problems.setdefault(f, []).insert(
                0,
                WorkspaceError(
                    scan.files[f].where(("project", "name"), ("project",), root=scan.root),
                    f"two projects are named `{key}`: this one and {named}{more}",
                    "rename one of them: project names must be unique in a repository",
                ),
            )
    return unique, duplicates


def _static_requirements(scan: Scan, folder: Path) -> tuple[set[str], Listed]:
    """The extras and requirements `[project]` of the project at `folder` writes out."""
    file = scan.files[folder]
    table = file.data["project"]
    listed: Listed = []
    extras: set[str] = set()
    raw = table.get("dependencies", [])
    for index, text in enumerate(raw if isinstance(raw, list) else []):
        path: tuple[str | int, ...] = ("project", "dependencies", index)
        listed.append(("", text, file.where(path, path[:-1], ("project",), root=scan.root)))
    optional = table.get("optional-dependencies", {})
    for extra, texts in optional.items() if isinstance(optional, dict) else ():
        chosen = canonicalize_name(extra)
        extras.add(chosen)
        for index, text in enumerate(texts if isinstance(texts, list) else []):
            path = ("project", "optional-dependencies", extra, index)
            where = file.where(path, path[:-1], ("project",), root=scan.root)
            listed.append((chosen, text, where))
    return extras, listed


def _project(scan: Scan, folder: Path, name: str, key: str) -> Project:
    """The project at `folder`, named `name` (`key` canonical), with its requirements
    and in-repo links; problems on the way are recorded on `scan`."""
    file = scan.files[folder]
    ws = scan.workspace_of(folder)
    found = sources(scan, folder, ws)
    scan.source_kinds[folder] = {name: source.kind for name, source in found.items()}
    dynamic = scan.dynamic(folder)
    origin, core = "pyproject.toml", None
    if REQUIREMENTS & set(dynamic):
        answer = dynamic_requirements(scan, folder, dynamic)
        if answer is None:
            return Project(name, key, folder, file.path, (), (), dynamic=dynamic)
        origin, core, extras, listed = answer
    else:
        extras, listed = _static_requirements(scan, folder)
    dependencies: list[Dependency] = []
    links: dict[str, tuple[Link, ...]] = {}
    for extra, text, where in listed:
        result = link(scan, folder, key, text, where, found, ws)
        if result is None:
            continue
        if not extra:
            dependencies.append(result[0])
        if result[1] is not None:
            links[extra] = (*links.get(extra, ()), result[1])
    return Project(
        name=name,
        key=key,
        root=folder,
        pyproject=file.path,
        dependencies=tuple(dependencies),
        in_repo=tuple(sorted({each.key for each in links.get("", ()) if each.key != key})),
        extras=tuple(sorted(extras)),
        links=links,
        dynamic=dynamic,
        requirements_from=origin,
        core=core,
    )
