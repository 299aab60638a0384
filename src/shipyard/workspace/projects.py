"""The Python projects of a repository and the in-repo dependencies between them.

A project is a folder whose pyproject.toml has a `[project]` table. A requirement of a
project is in-repo when `[tool.uv.sources]` (the project's own, else its uv workspace
root's) says `workspace = true` or `path = ...`, or, with no source entry, when a project of
the repository has that name, in `[project].dependencies` and in every extra of
`[project.optional-dependencies]` alike: a library needed only through an extra is as much
a part of what a binary installs as any other (see `_graph` for how extras are walked).
Problems of one project (a bad source, a cycle, a name two projects share, a project of the
repository named in `[build-system].requires`, which an isolated build would take from the
index) are raised when that project is asked about (`closure`, `check`), so a repository
can hold test fixtures that are broken on purpose; problems of the repository's own uv
workspace (its members list) are raised by `load_workspace`.
"""

from __future__ import annotations

import heapq
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from shipyard.workspace import _graph, _markers
from shipyard.workspace._discover import UvWorkspace, read_pyprojects, rel, uv_workspace
from shipyard.workspace._metadata import CoreMetadata, MetadataError, read_metadata
from shipyard.workspace._text import TomlFile, Where, WorkspaceError
from shipyard.workspace.lock import Lock

if TYPE_CHECKING:
    from shipyard.files.statcache import StatMemo

__all__ = ["Dependency", "Link", "Project", "Workspace", "load_workspace"]


@dataclass(frozen=True)
class Dependency:
    """One requirement of `[project].dependencies` and where it is written."""

    requirement: Requirement
    where: Where


@dataclass(frozen=True)
class Link:
    """A requirement naming a project of the repository: its key, the extras it asks of
    it (canonical, sorted) and where it is written."""

    key: str
    extras: tuple[str, ...]
    where: Where


@dataclass(frozen=True)
class Project:
    """A folder with a pyproject.toml holding a `[project]` table."""

    name: str
    key: str
    root: Path
    pyproject: Path
    dependencies: tuple[Dependency, ...]
    in_repo: tuple[str, ...]
    """Keys of the other projects `[project].dependencies` names (extras aside)."""
    extras: tuple[str, ...] = ()
    """The extras `[project.optional-dependencies]` declares, canonical and sorted."""
    links: Mapping[str, tuple[Link, ...]] = field(default_factory=dict, compare=False)
    """In-repo requirements by extra ("": `[project].dependencies`), those naming the
    project itself (`all = ["acme[plus]"]`) included."""
    dynamic: tuple[str, ...] = ()
    """`[project].dynamic`, as written."""
    requirements_from: str = "pyproject.toml"
    """Where the requirements were read: "pyproject.toml" (static), "uv.lock" (the
    lock's record of a member whose requirements are dynamic) or "backend" (its PEP 517
    metadata)."""
    core: CoreMetadata | None = field(default=None, compare=False)
    """The backend's metadata, when it was asked (see `requirements_from`)."""


_Next = tuple[tuple[_graph.Node, Where], ...]


@dataclass(frozen=True)
class Workspace:
    """Every project of a repository, the in-repo dependency graph and the root's uv.lock."""

    root: Path
    projects: Mapping[str, Project]
    lock: Lock | None
    duplicates: Mapping[str, tuple[Project, ...]] = field(default_factory=dict)
    members: tuple[str, ...] = ()
    """Keys of the repository's own uv workspace (the root's members; the root project)."""
    lock_status: list[str] = field(default_factory=list, compare=False)
    """How the lock's freshness was decided, once checked (`check_lock`), for people."""
    _by_folder: dict[Path, Project] = field(default_factory=dict, repr=False, compare=False)
    _problems: dict[Path, list[WorkspaceError]] = field(
        default_factory=dict, repr=False, compare=False
    )
    _broken: dict[Path, WorkspaceError] = field(default_factory=dict, repr=False, compare=False)
    _files: dict[Path, TomlFile] = field(default_factory=dict, repr=False, compare=False)
    _source_kinds: dict[Path, dict[str, str]] = field(
        default_factory=dict, repr=False, compare=False
    )
    _closures: dict[tuple[str, tuple[str, ...]], tuple[Project, ...]] = field(
        default_factory=dict, repr=False, compare=False
    )
    _reverse: _graph.Reverse = field(default_factory=dict, repr=False, compare=False)
    # Every project a node (a project with one extra) reaches, memoised for all nodes at
    # once, and a topological rank over the plain dependencies: closures in O(reached),
    # not a search per key.
    _reached: dict[_graph.Node, frozenset[str]] = field(
        default_factory=dict, repr=False, compare=False
    )
    _rank: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    _dependents: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False, compare=False)

    def _folder(self, path: Path) -> Path:
        return Path(os.path.normpath(path if path.is_absolute() else self.root / path))

    def project_at(self, folder: Path) -> Project | None:
        """The project whose root is exactly `folder` (absolute, or relative to the root).

        Raises the WorkspaceError of a pyproject.toml there that cannot be read, or
        the first problem of the project there (its name taken twice, say): a binary
        built from it reports its own file first."""
        folder = self._folder(folder)
        if folder in self._broken:
            raise self._broken[folder]
        if self._problems.get(folder):
            raise self._problems[folder][0]
        return self._by_folder.get(folder)

    def names(self) -> dict[str, Path]:
        """Every canonical name a project of the repository answers to, with its folder
        (relative to the root): names never to be installed from an index."""
        found = {key: project.root for key, project in self.projects.items()}
        for key, copies in self.duplicates.items():
            found.setdefault(key, copies[0].root)
        return {
            key: folder.relative_to(self.root) if folder.is_relative_to(self.root) else folder
            for key, folder in sorted(found.items())
        }

    def owner(self, path: Path) -> Project | None:
        """The deepest project whose root contains `path` (a file or a folder), if any."""
        current = self._folder(path)
        while True:
            if current in self._by_folder:
                return self._by_folder[current]
            if current in (self.root, current.parent):
                return None
            current = current.parent

    def _project(self, key: str) -> Project:
        if key in self.duplicates:
            raise self._problems[self.duplicates[key][-1].root][0]
        return self.projects[key]

    def check(self, key: str, extras: Iterable[str] = ()) -> None:
        """Raise the first problem of project `key` or of any project it depends on, with
        its `extras`."""
        self.closure(key, extras)

    def check_all(self) -> None:
        """Raise the first problem of any project, in path order (strict loading)."""
        for folder in sorted(self._broken):
            raise self._broken[folder]
        for project in sorted(self._by_folder.values(), key=lambda p: p.root):
            if self._problems.get(project.root):
                raise self._problems[project.root][0]
        for key in sorted(self.projects):
            self.closure(key, self.projects[key].extras)

    def closure(self, key: str, extras: Iterable[str] = ()) -> tuple[Project, ...]:
        """The in-repo projects `key` installed with `extras` depends on, directly or not,
        through plain dependencies and extras alike, dependencies first (topological
        order of the plain dependencies, ties broken by key); `key` itself is not included.

        Raises a WorkspaceError for a problem of any project on the way, or a cycle."""
        chosen = tuple(sorted({canonicalize_name(e) for e in extras} - {""}))
        if (key, chosen) in self._closures:
            return self._closures[(key, chosen)]
        reached: set[str] = set()
        for extra in ("", *chosen):
            reached.update(self._reach((key, extra)))
        reached.discard(key)
        if not self._rank:
            self._rank.update(self._ranks())  # a frozen dataclass: fill, don't assign
        result = tuple(self.projects[k] for k in sorted(reached, key=lambda k: (self._rank[k], k)))
        self._closures[(key, chosen)] = result
        return result

    def _reach(self, start: _graph.Node) -> frozenset[str]:
        """The keys node `start` depends on, directly or not; raises for a problem on the
        way or a cycle. Depth-first in node order, so the same link is named every run."""
        if start in self._reached:
            return self._reached[start]
        on_stack: set[_graph.Node] = set()
        # Each node on the way, what it needs, and what of that is still to visit.
        stack: list[tuple[_graph.Node, _Next, list[tuple[_graph.Node, Where]]]] = []

        def enter(node: _graph.Node) -> None:
            project = self._project(node[0])
            problems = self._problems.get(project.root)
            if problems:
                raise problems[0]
            on_stack.add(node)
            after = _graph.successors(project, node[1])
            stack.append((node, after, list(reversed(after))))

        enter(start)
        while stack:
            node, after, todo = stack[-1]
            if not todo:
                stack.pop()
                on_stack.discard(node)
                below: set[str] = set()
                for dep, _ in after:
                    below.add(dep[0])
                    below.update(self._reached[dep])
                self._reached[node] = frozenset(below)
                continue
            nxt, where = todo.pop()
            if nxt in on_stack:
                path = [n for n, _, _ in stack]
                cycle = [*path[path.index(nxt) :], nxt]
                raise WorkspaceError(
                    where,
                    "dependency cycle: " + " -> ".join(f"{k}[{x}]" if x else k for k, x in cycle),
                    "remove one of the links: a project cannot depend on itself through others",
                )
            if nxt not in self._reached:
                enter(nxt)
        return self._reached[start]

    def _ranks(self) -> dict[str, int]:
        """A topological rank of every project not on a cycle (Kahn's algorithm, the
        smallest key first among the ready): dependencies rank before their users."""
        waiting = {
            k: {d for d in p.in_repo if d in self.projects} for k, p in self.projects.items()
        }
        users: dict[str, list[str]] = {}
        for k, deps in waiting.items():
            for d in deps:
                users.setdefault(d, []).append(k)
        ready = [k for k, deps in waiting.items() if not deps]
        heapq.heapify(ready)
        rank: dict[str, int] = {}
        while ready:
            k = heapq.heappop(ready)
            rank[k] = len(rank)
            for user in users.get(k, ()):
                waiting[user].discard(k)
                if not waiting[user]:
                    heapq.heappush(ready, user)
        return rank

    def dependents(self, key: str) -> tuple[str, ...]:
        """Keys of the projects that depend on `key`, directly or not, plainly or through
        any of their extras, sorted."""
        if key not in self.projects and key not in self.duplicates:
            raise KeyError(key)
        if key not in self._dependents:
            found = {node[0] for node in self.requirers(key)}
            self._dependents[key] = tuple(sorted(found - {key}))
        return self._dependents[key]

    def requirers(self, key: str) -> dict[_graph.Node, tuple[str, ...]]:
        """Every (project, extra) that installs project `key`, directly or not ("" is the
        project alone), with a shortest chain of project names from it down to `key`."""
        if key not in self.projects:
            return {}
        if not self._reverse:
            self._reverse.update(_graph.reverse(self.projects))
        return _graph.chains(self.projects, self._reverse, key)


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
    builder = _Builder(root, files, broken, workspaces, lock)
    builder.core = builder.backend_metadata(cache_dir, env, memo)
    return builder.build(strict)


_REQUIREMENTS = frozenset({"dependencies", "optional-dependencies"})
_EXTRA = re.compile(r"""\bextra\s*==\s*['"]([^'"]+)['"]""")


def _extras_of(text: str) -> tuple[str, ...]:
    """The extras a Requires-Dist line belongs to, from its `extra == "x"` markers; ("",)
    for a plain requirement."""
    _, _, marker = text.partition(";")
    found = sorted({canonicalize_name(e) for e in _EXTRA.findall(marker)})
    return tuple(found) or ("",)


def _locked_text(entry: Mapping[str, object]) -> str | None:
    """A uv.lock `requires-dist` entry as the PEP 508 line it was locked from (enough to
    name the project, its extras and markers; the source lives beside it in the lock)."""
    name = entry.get("name")
    if not isinstance(name, str):
        return None
    extras = entry.get("extras")
    chosen = f"[{','.join(str(e) for e in extras)}]" if isinstance(extras, list) and extras else ""
    specifier = entry.get("specifier")
    marker = entry.get("marker")
    text = f"{name}{chosen}{specifier if isinstance(specifier, str) else ''}"
    return f"{text} ; {marker}" if isinstance(marker, str) and marker else text


@dataclass(frozen=True)
class _Source:
    """A `[tool.uv.sources]` entry: its kind, its path if local, and where it is written."""

    kind: str  # workspace, path, git, url, index, other
    path: Path | None
    where: Where


class _Builder:
    """Turns the parsed pyproject.toml files into projects and their in-repo edges."""

    def __init__(
        self,
        root: Path,
        files: dict[Path, TomlFile],
        broken: dict[Path, WorkspaceError],
        workspaces: dict[Path, UvWorkspace],
        lock: Lock | None,
    ) -> None:
        self.root = root
        self.files = files
        self.broken = broken
        self.workspaces = workspaces
        self.lock = lock
        self.problems: dict[Path, list[WorkspaceError]] = {}
        self.source_kinds: dict[Path, dict[str, str]] = {}
        self.names: dict[Path, tuple[str, str]] = {}  # folder -> (name, key)
        for folder, file in files.items():
            table = file.data.get("project")
            if not isinstance(table, dict):
                continue
            name = table.get("name")
            if not isinstance(name, str) or not name:
                broken[folder] = WorkspaceError(
                    file.where(("project",), root=root),
                    "[project] has no name",
                    'add `name = "..."` to the [project] table',
                )
                continue
            self.names[folder] = (name, canonicalize_name(name))
        self.by_key: dict[str, list[Path]] = {}
        for folder, (_, key) in sorted(self.names.items()):
            self.by_key.setdefault(key, []).append(folder)
        self.core: dict[Path, CoreMetadata | MetadataError] = {}

    def dynamic(self, folder: Path) -> tuple[str, ...]:
        """`[project].dynamic` of the project at `folder`, the strings of it."""
        listed = self.files[folder].data["project"].get("dynamic", [])
        return tuple(d for d in listed if isinstance(d, str)) if isinstance(listed, list) else ()

    def locked(self, folder: Path) -> dict[str, Any] | None:
        """uv.lock's `[[package]]` of the project at `folder`, when the lock covers it
        (the root project, or a member of the root's uv workspace)."""
        if self.lock is None or folder not in self.names:
            return None
        ws = self.workspace_of(folder)
        if folder != self.root and (ws is None or ws.root != self.root):
            return None
        return self.lock.member(self.names[folder][1])

    def backend_metadata(
        self, cache_dir: Path | None, env: Mapping[str, str] | None, memo: StatMemo | None
    ) -> dict[Path, CoreMetadata | MetadataError]:
        """The PEP 517 metadata of every project whose requirements are dynamic and that
        uv.lock does not record, in one backend run for those not cached."""
        wanted = [
            folder
            for folder in sorted(self.names)
            if _REQUIREMENTS & set(self.dynamic(folder)) and self.locked(folder) is None
        ]
        if not wanted:
            return {}
        from shipyard.errors import UsageError
        from shipyard.files.sources import GitIgnored, tree_hash

        git = GitIgnored(self.root).prefetch()
        digests: dict[Path, str] = {}
        failed: dict[Path, CoreMetadata | MetadataError] = {}
        for folder in wanted:
            nested = tuple(f for f in self.files if f != folder and f.is_relative_to(folder))
            try:
                digests[folder] = tree_hash(
                    folder, exclude=nested, root=self.root, git=git, memo=memo
                )
            except UsageError as error:
                failed[folder] = MetadataError(str(error))
        return {**failed, **read_metadata(digests, cache_dir=cache_dir, env=env)}

    def problem(self, folder: Path, error: WorkspaceError) -> None:
        self.problems.setdefault(folder, []).append(error)

    def workspace_of(self, folder: Path) -> UvWorkspace | None:
        """The uv workspace `folder` belongs to: the nearest one above that lists it."""
        for candidate in (folder, *folder.parents):
            ws = self.workspaces.get(candidate)
            if ws is not None:
                return ws if folder in ws.members else None
            if candidate == self.root:
                return None
        return None

    def sources(self, folder: Path, ws: UvWorkspace | None) -> dict[str, _Source]:
        """The project's `[tool.uv.sources]` over its workspace root's, by canonical name."""
        merged: dict[str, _Source] = {}
        owners = [self.files[folder]]
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
                    ("tool", "uv", "sources", raw), ("tool", "uv", "sources"), root=self.root,
                    key=True,
                )  # fmt: skip
                path = None
                if entry.get("workspace") is True:
                    kind = "workspace"
                elif isinstance(entry.get("path"), str):
                    kind, path = "path", Path(os.path.normpath(file.path.parent / entry["path"]))
                else:
                    kind = next((k for k in ("git", "url", "index") if k in entry), "other")
                merged[canonicalize_name(raw)] = _Source(kind, path, where)
        return merged

    def build(self, strict: bool) -> Workspace:
        projects: dict[Path, Project] = {}
        for folder, (name, key) in sorted(self.names.items()):
            projects[folder] = self.project(folder, name, key)
        for folder in sorted(self.files):  # a source without [project] (setup.py) too
            self.build_requirements(folder)
        unique = {}
        duplicates = {}
        for key, folders in self.by_key.items():
            if len(folders) == 1:
                unique[key] = projects[folders[0]]
                continue
            # One of them in a uv workspace (a member, or a workspace's root) is the one
            # the name means, as uv sees it: a copy elsewhere (a test fixture, a vendored
            # tree) shadows nothing and is no error.
            housed = [f for f in folders if f in self.workspaces or self.workspace_of(f)]
            if len(housed) == 1:
                unique[key] = projects[housed[0]]
                continue
            duplicates[key] = tuple(projects[f] for f in folders)
            for f in folders:
                others = [o for o in folders if o != f]
                named = str(self.files[others[0]].where(("project", "name"), root=self.root))
                more = f" and {len(others) - 1} more" if len(others) > 1 else ""
                self.problems.setdefault(f, []).insert(
                    0,
                    WorkspaceError(
                        self.files[f].where(("project", "name"), ("project",), root=self.root),
                        f"two projects are named `{key}`: this one and {named}{more}",
                        "rename one of them: project names must be unique in a repository",
                    ),
                )
        for ws in self.workspaces.values():
            for member in ws.members:
                for error in ws.problems:
                    self.problem(member, error)
        root_ws = self.workspaces.get(self.root)
        if root_ws is not None:
            members = tuple(sorted(self.names[m][1] for m in root_ws.members))
        else:
            members = (self.names[self.root][1],) if self.root in self.names else ()
        workspace = Workspace(
            root=self.root,
            projects=unique,
            lock=self.lock,
            duplicates=duplicates,
            members=members,
            _by_folder=dict(projects),
            _problems=self.problems,
            _broken=dict(self.broken),
            _files=self.files,
            _source_kinds=self.source_kinds,
        )
        if strict:
            workspace.check_all()
        return workspace

    def project(self, folder: Path, name: str, key: str) -> Project:
        file = self.files[folder]
        table = file.data["project"]
        ws = self.workspace_of(folder)
        sources = self.sources(folder, ws)
        self.source_kinds[folder] = {name: source.kind for name, source in sources.items()}
        dynamic = self.dynamic(folder)
        listed: list[tuple[str, object, Where]] = []  # (extra, text, where)
        extras: set[str] = set()
        origin, core = "pyproject.toml", None
        if _REQUIREMENTS & set(dynamic):
            found = self.dynamic_requirements(folder, dynamic)
            if found is None:
                return Project(name, key, folder, file.path, (), (), dynamic=dynamic)
            origin, core, declared, rows = found
            extras.update(declared)
            listed.extend(rows)
        else:
            raw = table.get("dependencies", [])
            for index, text in enumerate(raw if isinstance(raw, list) else []):
                path: tuple[str | int, ...] = ("project", "dependencies", index)
                listed.append(("", text, file.where(path, path[:-1], ("project",), root=self.root)))
            optional = table.get("optional-dependencies", {})
            for extra, texts in optional.items() if isinstance(optional, dict) else ():
                chosen = canonicalize_name(extra)
                extras.add(chosen)
                for index, text in enumerate(texts if isinstance(texts, list) else []):
                    path = ("project", "optional-dependencies", extra, index)
                    where = file.where(path, path[:-1], ("project",), root=self.root)
                    listed.append((chosen, text, where))
        dependencies: list[Dependency] = []
        links: dict[str, tuple[Link, ...]] = {}
        for extra, text, where in listed:
            result = self.requirement(folder, key, text, where, sources, ws)
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
            in_repo=tuple(sorted({link.key for link in links.get("", ()) if link.key != key})),
            extras=tuple(sorted(extras)),
            links=links,
            dynamic=dynamic,
            requirements_from=origin,
            core=core,
        )

    def dynamic_requirements(
        self, folder: Path, dynamic: tuple[str, ...]
    ) -> tuple[str, CoreMetadata | None, set[str], list[tuple[str, object, Where]]] | None:
        """The requirements of a project whose `[project].dynamic` names them: uv.lock's
        record when the lock covers the project, else its backend's metadata. Each
        requirement is placed at the `dynamic` entry that made it so. None, with a
        problem recorded, when the backend could not tell."""
        file = self.files[folder]
        index = next(i for i, d in enumerate(dynamic) if d in _REQUIREMENTS)
        where = file.where(("project", "dynamic", index), ("project",), root=self.root)
        texts: list[str] = []
        declared: set[str] = set()
        package = self.locked(folder)
        if package is not None:
            metadata = package.get("metadata", {})
            metadata = metadata if isinstance(metadata, dict) else {}
            for entry in metadata.get("requires-dist", []):
                text = _locked_text(entry) if isinstance(entry, dict) else None
                if text is not None:
                    texts.append(text)
            listed = metadata.get("provides-extras", [])
            declared.update(canonicalize_name(e) for e in listed if isinstance(e, str))
            declared.update(
                canonicalize_name(e) for e in package.get("optional-dependencies", {}) or {}
            )
            origin, core = "uv.lock", None
        else:
            answer = self.core.get(folder)
            if not isinstance(answer, CoreMetadata):
                problem = answer.problem if answer else "it was not asked"
                self.problem(
                    folder,
                    WorkspaceError(
                        where,
                        f"`{self.names[folder][0]}` declares its requirements dynamic and its "
                        f"PEP 517 backend could not give its metadata: {problem}",
                        "make `python -m build --wheel` work in this folder, or run `uv lock` "
                        "so uv.lock records its requirements",
                    ),
                )
                return None
            texts = list(answer.requires_dist)
            declared.update(canonicalize_name(e) for e in answer.provides_extra)
            origin, core = "backend", answer
        rows: list[tuple[str, object, Where]] = []
        for text in texts:
            for extra in _extras_of(text):
                declared.update({extra} - {""})
                rows.append((extra, text, where))
        return origin, core, declared, rows

    def build_requirements(self, folder: Path) -> None:
        """Record a problem for each `[build-system].requires` entry naming a project of
        the repository: the wheel build installs build requirements in an isolated
        environment from the index, where anyone may publish that name."""
        file = self.files[folder]
        table = file.data.get("build-system")
        listed = table.get("requires") if isinstance(table, dict) else None
        for index, text in enumerate(listed if isinstance(listed, list) else []):
            try:
                requirement = Requirement(text)
            except (InvalidRequirement, TypeError):
                continue  # not ours to judge: the build front end says what is wrong
            owners = self.by_key.get(canonicalize_name(requirement.name))
            if not owners:
                continue
            path: tuple[str | int, ...] = ("build-system", "requires", index)
            where = file.where(path, path[:-1], ("build-system",), root=self.root)
            self.problem(
                folder,
                WorkspaceError(
                    where,
                    f"[build-system].requires names `{requirement.name}` "
                    f"(`{canonicalize_name(requirement.name)}`), a project of the repository "
                    f"({rel(self.files[owners[0]].path, self.root)}): shipyard builds each "
                    "wheel in an isolated environment from the index, so an in-repo build "
                    "requirement would come from the index, as whoever published that name "
                    "there made it, and run during the build",
                    "vendor it in this project's tree and name its folder in [build-system] "
                    "backend-path, or publish it to your index under a name no project of "
                    "the repository has",
                ),
            )

    def requirement(
        self,
        folder: Path,
        key: str,
        text: object,
        where: Where,
        sources: dict[str, _Source],
        ws: UvWorkspace | None,
    ) -> tuple[Dependency, Link | None] | None:
        """Requirement `text` of project `key`, written at `where`, with its link when it
        names a project of the repository (`key` itself included: an extra may ask for the
        project's other extras). None, with a problem recorded, when it is not PEP 508."""
        try:
            requirement = Requirement(text)  # type: ignore[arg-type]  # TypeError if not str
        except (InvalidRequirement, TypeError) as error:
            self.problem(
                folder,
                WorkspaceError(
                    where, f"invalid requirement {text!r}: {error}", "write it as PEP 508"
                ),
            )
            return None
        dependency = Dependency(requirement, where)
        dep = canonicalize_name(requirement.name)
        extras = tuple(sorted({canonicalize_name(e) for e in requirement.extras}))
        if dep == key:
            return dependency, Link(key, extras, where)
        target = self.resolve(folder, dep, where, sources.get(dep), ws)
        if target is not None:
            return dependency, Link(target, extras, where)
        in_lock = self.lock is not None and (
            (ws is not None and ws.root == self.root) or folder == self.root
        )
        if (
            in_lock
            and self.lock is not None
            and dep not in self.lock.packages
            and not _markers.never(requirement.marker, self.lock.requires_python)
        ):
            self.problem(
                folder,
                WorkspaceError(
                    where,
                    f"`{requirement.name}` is neither a project of the repository nor a "
                    "package of uv.lock",
                    "run `uv lock` (or fix the name)",
                ),
            )
        return dependency, None

    def resolve(
        self,
        folder: Path,
        dep: str,
        where: Where,
        source: _Source | None,
        ws: UvWorkspace | None,
    ) -> str | None:
        """The key of the in-repo project requirement `dep` names, or None (third-party)."""
        if source is None:
            folders = self.by_key.get(dep, [])
            if len(folders) > 1:
                places = ", ".join(rel(self.files[f].path, self.root) for f in folders)
                self.problem(
                    folder,
                    WorkspaceError(
                        where,
                        f"`{dep}` could be any of {len(folders)} projects: {places}",
                        "rename one of them, or point at one with a `path` source in "
                        "[tool.uv.sources]",
                    ),
                )
                return None
            return dep if folders else None
        if source.kind == "workspace":
            members = ws.members if ws is not None else set()
            if any(self.names.get(m, ("", ""))[1] == dep for m in members):
                return dep
            home = rel(ws.file.path, self.root) if ws is not None else "no workspace"
            self.problem(
                folder,
                WorkspaceError(
                    where,
                    f"`{dep}` has `workspace = true` in [tool.uv.sources] ({source.where}) "
                    f"but is not a member of the workspace ({home})",
                    "add its folder to [tool.uv.workspace] members, or use a `path` source",
                ),
            )
            return None
        if source.kind == "path" and source.path is not None:
            target = source.path
            if target.is_file():
                return None  # a wheel or sdist: a third-party artifact
            if target in self.broken:
                self.problem(folder, self.broken[target])
                return None
            if target not in self.names:
                outside = not target.is_relative_to(self.root)
                self.problem(
                    folder,
                    WorkspaceError(
                        source.where,
                        f"no pyproject.toml at {rel(target, self.root)} (the path source of "
                        f"`{dep}`)" + (", which is outside the repository" if outside else ""),
                        "point the path at a folder of the repository with a pyproject.toml",
                    ),
                )
                return None
            found = self.names[target][1]
            if found != dep:
                self.problem(
                    folder,
                    WorkspaceError(
                        source.where,
                        f"the path source of `{dep}` is the project `{found}`",
                        "point it at the folder of the project with that name",
                    ),
                )
                return None
            return dep  # a name two projects share is raised when `closure` reaches it
        return None
