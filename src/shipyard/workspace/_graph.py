"""The in-repo graph at the level of extras: a node is a project and one of its extras.

`(key, "")` is project `key` installed plainly; `(key, "plus")` is it installed with its
extra `plus`, which brings its plain dependencies too. An extra naming its own project
(`all = ["acme[plus]"]`) widens the node to those extras rather than adding an edge, so
every edge leads to another project: `acme-app[plus]` needing `acme-lib[fast]` is the edges
(acme-app, plus) -> (acme-lib, "") and (acme-lib, fast). Walking nodes instead of projects
is what makes a library needed only through an extra, or through an extra asked of an
in-repo dependency, part of what a binary installs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shipyard.workspace._text import Where
    from shipyard.workspace.projects import Project

__all__ = ["Node", "Reverse", "chains", "extras_of", "reverse", "successors"]

Node = tuple[str, str]
"""(project key, canonical extra name or "" for the project alone)."""

Reverse = dict[Node, list[Node]]
"""For each node, the nodes with an edge to it."""


def extras_of(project: Project, extra: str) -> tuple[str, ...]:
    """ "" and `extra`, plus the project's extras they bring by naming the project itself."""
    seen = {"", extra}
    todo = ["", extra]
    while todo:
        for link in project.links.get(todo.pop(), ()):
            if link.key == project.key:
                fresh = [e for e in link.extras if e not in seen]
                seen.update(fresh)
                todo.extend(fresh)
    return tuple(sorted(seen))


def successors(project: Project, extra: str) -> tuple[tuple[Node, Where], ...]:
    """The nodes node (project, extra) needs, sorted, each with where its first link is written."""
    found: dict[Node, Where] = {}
    for chosen in extras_of(project, extra):
        for link in project.links.get(chosen, ()):
            if link.key == project.key:
                continue
            for target in ("", *link.extras):
                found.setdefault((link.key, target), link.where)
    return tuple(sorted(found.items(), key=lambda item: item[0]))


def reverse(projects: Mapping[str, Project]) -> Reverse:
    """The users of every node reachable from the projects' own nodes (each project plain
    and with each extra it declares), each list sorted."""
    users: Reverse = {}
    todo = [(key, extra) for key in sorted(projects) for extra in ("", *projects[key].extras)]
    seen = set(todo)
    while todo:
        node = todo.pop()
        for target, _ in successors(projects[node[0]], node[1]):
            users.setdefault(target, []).append(node)
            if target not in seen and target[0] in projects:
                seen.add(target)
                todo.append(target)
    for listed in users.values():
        listed.sort()
    return users


def chains(
    projects: Mapping[str, Project], users: Reverse, library: str
) -> dict[Node, tuple[str, ...]]:
    """Every node that installs `library` (other than the library's own), with a shortest
    chain of project names from the node's project down to the library.

    A breadth-first walk up the reverse edges from every node of the library: the first
    time a node is reached, it is through one of its nearest paths."""
    seeds = sorted({n for n in users if n[0] == library} | {(library, "")})
    via: dict[Node, tuple[str, ...]] = dict.fromkeys(seeds, ())
    queue = deque(seeds)
    while queue:
        node = queue.popleft()
        chain = (projects[node[0]].name, *via[node])
        for user in users.get(node, ()):
            if user not in via:
                via[user] = chain
                queue.append(user)
    return {node: chain for node, chain in via.items() if node[0] != library}
