"""The graph as one self-contained HTML page: the data, the script and the style inlined,
nothing fetched (no network, no CDN), so it opens from a file:// URL or a CI artifact.

The columns are worked out here: in-repo libraries by depth (a library left of the
libraries that need it, at most `_LIBRARY_COLUMNS` columns), then the binaries'
projects, the binaries and their outputs. The page's script (page.js) stacks one
collapsible box per folder in each column, draws the edges, and searches.
"""

from __future__ import annotations

import html as _html
import json
import re
from importlib import resources

from shipyard.engine.graph.model import STATES, Graph
from shipyard.engine.graph.text import COLOURS

__all__ = ["columns", "html"]

_LIBRARY_COLUMNS = 4  # deeper library chains share the last library column
_OUTPUTS = ("wheel", "zipapp", "image")


def _library_depths(graph: Graph) -> dict[str, int]:
    """Each library's depth: 0 when it needs no other library, else one more than the
    deepest it needs (a cycle, which a build would refuse, counts as depth 0)."""
    libraries = {n.id for n in graph.nodes if n.kind == "library"}
    needs: dict[str, list[str]] = {key: [] for key in libraries}
    for edge in graph.edges:
        if edge.kind == "needs" and edge.source in libraries and edge.target in libraries:
            needs[edge.source].append(edge.target)
    depth: dict[str, int] = {}
    for start in sorted(libraries):
        stack = [(start, iter(needs[start]))]
        on_path = {start}
        while stack:
            node, todo = stack[-1]
            nxt = next(todo, None)
            if nxt is None:
                stack.pop()
                on_path.discard(node)
                depth[node] = max((depth.get(d, 0) + 1 for d in needs[node]), default=0)
            elif nxt not in depth and nxt not in on_path:
                on_path.add(nxt)
                stack.append((nxt, iter(needs[nxt])))
    return depth


def columns(graph: Graph) -> tuple[dict[str, int], list[str]]:
    """Each node's column, and each column's heading."""
    depths = _library_depths(graph)
    library_columns = min(max(depths.values(), default=-1) + 1, _LIBRARY_COLUMNS)
    found: dict[str, int] = {}
    for node in graph.nodes:
        if node.kind == "library":
            found[node.id] = min(depths[node.id], _LIBRARY_COLUMNS - 1)
        elif node.kind == "project":
            found[node.id] = library_columns
        elif node.kind == "binary":
            found[node.id] = library_columns + 1
        else:
            found[node.id] = library_columns + 2
    heads = ["libraries"] * library_columns + ["projects", "binaries", "outputs"]
    return found, heads


def _natural(text: str) -> tuple[tuple[str, int], ...]:
    """A sort key reading the digits in `text` as numbers: p9 before p10."""
    parts = re.split(r"(\d+)", text)
    return tuple((part, 0) if i % 2 == 0 else ("", int(part)) for i, part in enumerate(parts))


def _data(graph: Graph) -> dict[str, object]:
    """What the page's script reads: nodes as rows, in drawing order (by column, then
    folder, then beside what they belong to), and edges between row numbers."""
    column, heads = columns(graph)
    # Projects by name (p9 before p10); a binary sits level with its project, an
    # output with its binary.
    ranked = sorted(range(len(graph.nodes)), key=lambda i: _natural(graph.nodes[i].label))
    position = {graph.nodes[i].id: rank for rank, i in enumerate(ranked)}
    owner: dict[str, int] = {}
    for edge in graph.edges:
        if edge.kind == "source":
            owner.setdefault(edge.source, position[edge.target])
    for edge in graph.edges:
        if edge.kind == "output":
            owner.setdefault(edge.target, owner.get(edge.source, position[edge.source]))

    def order(index: int) -> tuple[int, str, int, int, tuple[tuple[str, int], ...]]:
        node = graph.nodes[index]
        kind = _OUTPUTS.index(node.kind) if node.kind in _OUTPUTS else 0
        place = owner.get(node.id, position[node.id])
        return column[node.id], node.group, place, kind, _natural(node.label)

    rows = sorted(range(len(graph.nodes)), key=order)
    where = {graph.nodes[i].id: k for k, i in enumerate(rows)}
    nodes = [
        [n.id, n.kind, n.label, n.group, n.detail, n.state, list(n.reasons), column[n.id]]
        for n in (graph.nodes[i] for i in rows)
    ]
    edges = [
        [where[e.source], where[e.target], e.kind, e.label, int(e.affected)] for e in graph.edges
    ]
    return {
        "title": graph.title,
        "since": graph.since,
        "columns": heads,
        "nodes": nodes,
        "edges": edges,
    }


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


_KINDS = (
    ("library", "in-repo library"),
    ("project", "project"),
    ("binary", "binary"),
    ("wheel", "wheel / zipapp"),
    ("image", "image"),
)


def _legend(graph: Graph) -> str:
    keys = [
        f'<span class="key k-{kind}"><i class="swatch-{kind}"></i>{label}</span>'
        for kind, label in _KINDS
    ]
    if graph.since:
        since = _html.escape(graph.since)
        keys += [
            f'<span class="key" title="files in its folder changed since {since}">'
            '<i class="swatch-changed"></i>changed</span>',
            f'<span class="key" title="needs a change, or is built from one, since {since}">'
            '<i class="swatch-affected"></i>affected</span>',
            f'<span class="key">since <code>{since}</code></span>',
        ]
    return "".join(keys)


def _colours() -> str:
    """The style of each kind and --since state of node, and of its legend swatch."""
    rules = []
    for name, (fill, stroke) in COLOURS.items():
        node = f".node.{name} rect" if name in STATES else f".k-{name} rect"
        width = " stroke-width: 3;" if name in STATES else ""
        rules.append(f"{node} {{ fill: {fill}; stroke: {stroke};{width} }}")
        rules.append(f"#legend i.swatch-{name} {{ background: {fill}; border-color: {stroke}; }}")
    return "\n".join(rules) + "\n"


def html(graph: Graph) -> str:
    """`graph` as one HTML page that loads nothing: open it from disk in any browser."""
    # "<" escaped: no "</script>" in the data can end its element early.
    data = json.dumps(_data(graph), separators=(",", ":")).replace("<", "\\u003c")
    title = _html.escape(f"{graph.title}: shipyard graph")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="shipyard graph">
<link rel="icon" href="data:,">
<title>{title}</title>
<style>
{_colours()}{_asset("page.css")}</style>
</head>
<body>
<header>
<h1>{title}</h1>
<input type="search" id="search" placeholder="search projects, binaries, outputs"
 aria-label="search">
<button type="button" id="expand">expand all</button>
<button type="button" id="collapse">collapse all</button>
<button type="button" id="zoom-out" aria-label="zoom out">&minus;</button>
<button type="button" id="zoom-in" aria-label="zoom in">+</button>
<span id="status"></span>
<div id="legend">{_legend(graph)}</div>
</header>
<main>
<div id="canvas"><svg id="graph" role="img" aria-label="{title}"></svg></div>
<aside id="info"></aside>
</main>
<script type="application/json" id="graph-data">{data}</script>
<script>
{_asset("page.js")}</script>
</body>
</html>
"""
