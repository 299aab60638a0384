"""The graph `shipyard graph` draws: projects, in-repo libraries, binaries, their outputs.

Nothing here is worked out afresh: the binaries and their outputs are the plan's
(`make_plan`: the wheel of each source, shared by the binaries built from it, a
zipapp and an image per binary, with their platforms), the projects and the links
between them are the workspace's (`Workspace.projects`, `Project.links`,
`Workspace.closure`), and `--since` is `affected`'s answer, each reason kept as the
text `shipyard affected` prints. Edges point the way the model reads: a binary is
built from its project and produces its outputs; a project needs its libraries.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from shipyard.engine.affected import Affected, affected
from shipyard.engine.inputs import SourceFolders, relative
from shipyard.engine.plan import Action, Selection, host_os, make_plan
from shipyard.engine.selecting import selected_binaries
from shipyard.manifest import Manifest
from shipyard.workspace import Workspace

__all__ = ["EDGE_KINDS", "NODE_KINDS", "STATES", "Edge", "Graph", "Node", "build_graph"]

# What a node is: a project some binary is built from, a project only others need
# (an in-repo library), a binary of binaries.yaml, or one of its outputs.
NODE_KINDS = ("library", "project", "binary", "wheel", "zipapp", "image")
# binary -> project ("source"), project -> library ("needs"), binary -> output ("output").
EDGE_KINDS = ("source", "needs", "output")
# With --since: files changed in the node's folder, or the node needs (or is) a change.
STATES = ("changed", "affected")


@dataclass(frozen=True)
class Node:
    """One thing drawn: `id` is unique and stable (`project:KEY`, `binary:NAME`, or the
    plan's action id for an output); `group` is the folder it is grouped under."""

    id: str
    kind: str  # one of NODE_KINDS
    label: str
    group: str  # the parent folder of its folder, repository-relative ("." at the top)
    detail: str = ""  # its folder, or an output's platforms
    state: str = ""  # "" or one of STATES
    reasons: tuple[str, ...] = ()  # why it is in `state`, one line each

    def to_json(self) -> dict[str, object]:
        """A JSON-ready view."""
        return {
            "id": self.id,
            "kind": self.kind,
            "label": self.label,
            "group": self.group,
            "detail": self.detail,
            "state": self.state,
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class Edge:
    """`source` uses `target`: built from it, needs it (through `label`, an extra, when
    not plainly), or produces it."""

    source: str
    target: str
    kind: str  # one of EDGE_KINDS
    label: str = ""
    affected: bool = False  # with --since: a change travels along it

    def to_json(self) -> dict[str, object]:
        """A JSON-ready view."""
        return {
            "source": self.source,
            "target": self.target,
            "kind": self.kind,
            "label": self.label,
            "affected": self.affected,
        }


@dataclass(frozen=True)
class Graph:
    """The nodes (in drawing order: libraries, projects, binaries, outputs) and edges."""

    title: str
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    since: str | None = None

    def node(self, node_id: str) -> Node:
        """The node `node_id` (KeyError if there is none)."""
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    def to_json(self) -> dict[str, object]:
        """The graph as `shipyard graph --format=json` prints it."""
        return {
            "title": self.title,
            "since": self.since,
            "nodes": [n.to_json() for n in self.nodes],
            "edges": [e.to_json() for e in self.edges],
        }


def _group(folder: str) -> str:
    """The folder a node is grouped under: its folder's parent ('.' at the top)."""
    return "." if folder == "." else str(PurePosixPath(folder).parent)


def _plan_actions(manifest: Manifest, selection: Selection, workspace: Workspace) -> list[Action]:
    """The plan's actions for every selected binary, whatever this machine's OS: a
    binary built only on other hosts is planned as the first of them would plan it."""
    plan = make_plan(manifest, selection, workspace=workspace)
    actions = {a.id: a for a in plan.actions}
    elsewhere: dict[str, list[str]] = {}
    for skip in plan.skips:
        binary = manifest.binaries[skip.binary]
        if host_os() not in binary.host:
            elsewhere.setdefault(binary.host[0], []).append(binary.name)
    for host, names in elsewhere.items():
        there = make_plan(manifest, Selection(binaries=tuple(names)), host, workspace)
        for action in there.actions:
            previous = actions.get(action.id)
            if previous is not None and action.kind == "wheel":  # a source both share
                binaries = tuple(dict.fromkeys((*previous.binaries, *action.binaries)))
                actions[action.id] = replace(previous, binaries=binaries)
            else:
                actions[action.id] = action
    return list(actions.values())


class _Builder:
    """The graph being built: nodes by id (first added first drawn) and edges."""

    def __init__(self, manifest: Manifest, workspace: Workspace) -> None:
        self.manifest = manifest
        self.workspace = workspace
        self.nodes: dict[str, Node] = {}
        self.edges: dict[tuple[str, str, str], Edge] = {}

    def rel(self, path: Path) -> str:
        """`path` relative to the repository, with '/'."""
        return relative(path, self.manifest.root) or str(path)

    def project(self, key: str, kind: str) -> str:
        node_id = f"project:{key}"
        if node_id not in self.nodes:
            project = self.workspace.projects[key]
            folder = self.rel(project.root)
            self.nodes[node_id] = Node(node_id, kind, project.name, _group(folder), folder)
        return node_id

    def edge(self, source: str, target: str, kind: str, label: str = "") -> None:
        self.edges.setdefault((source, target, kind), Edge(source, target, kind, label))


def _projects_shown(
    manifest: Manifest, workspace: Workspace, names: Iterable[str], narrowed: bool
) -> dict[str, bool]:
    """The projects to draw, each with whether a drawn binary is built from it: the
    binaries' projects and the libraries they install (with their extras); unless the
    selection is narrowed, the uv workspace's members too (every project of a
    repository with no uv workspace), and the projects those link to."""
    own: dict[str, bool] = {}
    for name in names:
        binary = manifest.binaries[name]
        project = workspace.project_at(binary.source)
        if project is None:
            continue
        own[project.key] = True
        for library in workspace.closure(project.key, binary.extras):
            own.setdefault(library.key, False)
    if narrowed:
        return own
    todo = [k for k in (workspace.members or tuple(workspace.projects)) if k in workspace.projects]
    while todo:
        key = todo.pop()
        own.setdefault(key, False)
        for links in workspace.projects[key].links.values():
            todo.extend(
                link.key for link in links if link.key in workspace.projects and link.key not in own
            )
    return own


def _output_node(builder: _Builder, action: Action, group: str) -> Node:
    if action.kind == "wheel":
        project = builder.workspace.projects.get(action.project)
        label = f"wheel {project.name if project else action.binaries[0]}"
        return Node(action.id, "wheel", label, group, builder.rel(action.source))
    detail = ", ".join(action.platforms)
    if action.pythons:
        detail += " · Python " + ", ".join(action.pythons)
    if action.kind == "image" and action.image is not None and action.image.variants:
        detail += " · variants " + ", ".join(action.image.variants)
    return Node(action.id, action.kind, f"{action.kind} {action.binaries[0]}", group, detail)


def build_graph(
    manifest: Manifest,
    workspace: Workspace,
    selection: Selection | None = None,
    *,
    since: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Graph:
    """The graph of the binaries `selection` picks (all by default), their projects,
    the in-repo libraries those need and the outputs the plan builds; with `since` (a
    git ref), what is affected by the changes since then marked, with the reasons.

    Raises what `make_plan` raises for a selection (UsageError, exit 2, for an unknown
    --target or --binary) and for a broken project a drawn binary uses."""
    selection = selection if selection is not None else Selection()
    actions = _plan_actions(manifest, selection, workspace)
    names = [b.name for b in selected_binaries(manifest, selection)]
    narrowed = bool(selection.targets or selection.binaries)
    builder = _Builder(manifest, workspace)
    shown = _projects_shown(manifest, workspace, names, narrowed)
    # Libraries first, then the binaries' projects: the order the page draws them.
    for key in sorted(shown, key=lambda k: (shown[k], builder.rel(workspace.projects[k].root))):
        builder.project(key, "project" if shown[key] else "library")
    for key in list(shown):
        for extra, links in sorted(workspace.projects[key].links.items()):
            for link in links:
                if link.key != key and link.key in shown:
                    builder.edge(f"project:{key}", f"project:{link.key}", "needs", extra)
    outputs: dict[str, list[Action]] = {}
    for action in actions:
        for name in action.binaries if action.kind == "wheel" else action.binaries[:1]:
            if action.kind != "wheel" or "wheel" in manifest.binaries[name].outputs:
                outputs.setdefault(name, []).append(action)
    for name in names:
        binary = manifest.binaries[name]
        folder = builder.rel(binary.source)
        node_id = f"binary:{name}"
        builder.nodes[node_id] = Node(node_id, "binary", name, _group(folder), folder)
        project = workspace.project_at(binary.source)
        if project is not None:
            builder.edge(node_id, f"project:{project.key}", "source")
    for name in names:
        group = builder.nodes[f"binary:{name}"].group
        for action in outputs.get(name, ()):
            builder.nodes.setdefault(action.id, _output_node(builder, action, group))
            builder.edge(f"binary:{name}", action.id, "output")
    graph = Graph(
        manifest.project.name,
        tuple(builder.nodes.values()),
        tuple(builder.edges.values()),
    )
    if since:
        found = affected(manifest, workspace, since, names, env=env)
        graph = mark_affected(graph, manifest, workspace, found, since)
    return graph


def mark_affected(
    graph: Graph,
    manifest: Manifest,
    workspace: Workspace,
    found: Iterable[Affected],
    since: str,
) -> Graph:
    """`graph` with what `found` (affected's answer) says marked: the projects whose
    files changed, the projects on the way from them to each affected binary, the
    binaries (each with its reasons) and their outputs, and the edges between them."""
    folders = SourceFolders(manifest, workspace)
    key_of = {p.name: key for key, p in workspace.projects.items()}
    states: dict[str, str] = {}
    reasons: dict[str, list[str]] = {}
    hot: set[tuple[str, str]] = set()
    outputs: dict[str, list[str]] = {}
    for edge in graph.edges:
        if edge.kind == "output":
            outputs.setdefault(edge.source, []).append(edge.target)

    def mark(node_id: str, state: str, why: str) -> None:
        if states.get(node_id) != "changed":
            states[node_id] = state
        reasons.setdefault(node_id, [])
        if why not in reasons[node_id]:
            reasons[node_id].append(why)

    for item in found:
        binary_id = f"binary:{item.binary}"
        project = workspace.project_at(manifest.binaries[item.binary].source)
        own = f"project:{project.key}" if project is not None else None
        for reason in item.reasons:
            mark(binary_id, "affected", str(reason))
            owner = folders.projects.get(folders.owner(reason.path) or "")
            if reason.kind in ("source", "library") and owner is not None:
                mark(f"project:{owner}", "changed", f"{reason.path} changed")
            if reason.kind == "library" and own is not None:
                chain = [own, *(f"project:{key_of[n]}" for n in reason.via if n in key_of)]
                changed = reason.via[-1] if reason.via else ""
                for user, library in itertools.pairwise(chain):
                    hot.add((user, library))
                    mark(user, "affected", f"needs {changed}: {reason.path} changed")
            if own is not None and reason.kind in ("source", "library"):
                hot.add((binary_id, own))
        for output in outputs.get(binary_id, ()):
            hot.add((binary_id, output))
            mark(output, "affected", f"an output of {item.binary}, which is affected")
    nodes = tuple(
        replace(n, state=states[n.id], reasons=tuple(reasons[n.id])) if n.id in states else n
        for n in graph.nodes
    )
    edges = tuple(
        replace(e, affected=True) if (e.source, e.target) in hot else e for e in graph.edges
    )
    return replace(graph, nodes=nodes, edges=edges, since=since)
