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
workspace (its members list) are raised by `load_workspace` (`_load`), which builds the
`Workspace`; this module holds what it builds and the questions asked of it.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from shipyard.workspace import _graph
from shipyard.workspace._metadata import CoreMetadata
from shipyard.workspace._text import TomlFile, Where, WorkspaceError
from shipyard.workspace.lock import Lock

__all__ = ["Dependency", "Link", "Project", "Workspace"]


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
