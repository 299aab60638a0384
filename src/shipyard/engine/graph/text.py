"""The graph as Mermaid (a `flowchart`) and as Graphviz DOT: one cluster per folder,
a class per kind of node, and with --since a class and a style for what changed and
what it affects (in DOT, each reason in the node's tooltip as well)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from shipyard.engine.graph.model import NODE_KINDS, Graph, Node

__all__ = ["COLOURS", "dot", "mermaid"]

# Fill and stroke of each kind of node and of each --since state, shared by both formats.
COLOURS: dict[str, tuple[str, str]] = {
    "library": ("#e8f0fe", "#4a6fa5"),
    "project": ("#e6f4ea", "#3c8d50"),
    "binary": ("#fff8e1", "#b08800"),
    "wheel": ("#f3e8fd", "#7b4fa5"),
    "zipapp": ("#f3e8fd", "#7b4fa5"),
    "image": ("#e0f7fa", "#00838f"),
    "changed": ("#fde2e1", "#d62728"),
    "affected": ("#ffe8cc", "#e67300"),
}
_HOT = "#d62728"  # an edge a change travels along


def _by_group(nodes: Iterable[Node]) -> dict[str, list[Node]]:
    groups: dict[str, list[Node]] = {}
    for node in nodes:
        groups.setdefault(node.group, []).append(node)
    return dict(sorted(groups.items()))


def _mermaid_ids(graph: Graph) -> dict[str, str]:
    """Each node's Mermaid id: its id with every other character than a letter, a digit
    or '_' made '_', made unique with a number."""
    ids: dict[str, str] = {}
    taken: set[str] = set()
    for node in graph.nodes:
        base = re.sub(r"\W", "_", node.id, flags=re.ASCII)
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}_{n}"
        taken.add(name)
        ids[node.id] = name
    return ids


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;")


_SHAPES = {
    "library": ('(["', '"])'),
    "project": ('["', '"]'),
    "binary": ('[["', '"]]'),
}


def mermaid(graph: Graph) -> str:
    """`graph` as a Mermaid flowchart, left to right."""
    ids = _mermaid_ids(graph)
    lines = ["flowchart LR", f"  %% shipyard graph of {graph.title}"]
    if graph.since:
        lines.append(f"  %% marked: what changed since {graph.since} and what it affects")
    for index, (group, nodes) in enumerate(_by_group(graph.nodes).items()):
        indent = "  " if group == "." else "    "
        if group != ".":
            lines.append(f'  subgraph group{index}["{_mermaid_text(group + "/")}"]')
        for node in nodes:
            start, end = _SHAPES.get(node.kind, ('[/"', '"/]'))
            lines.append(f"{indent}{ids[node.id]}{start}{_mermaid_text(node.label)}{end}")
        if group != ".":
            lines.append("  end")
    hot: list[str] = []
    for index, edge in enumerate(graph.edges):
        arrow = "-.->" if edge.kind == "output" else "-->"
        label = f"|{_mermaid_text(edge.label)}|" if edge.label else ""
        lines.append(f"  {ids[edge.source]} {arrow}{label} {ids[edge.target]}")
        if edge.affected:
            hot.append(str(index))
    for name in (*NODE_KINDS, "changed", "affected"):
        fill, stroke = COLOURS[name]
        width = "3px" if name in ("changed", "affected") else "1px"
        lines.append(f"  classDef {name} fill:{fill},stroke:{stroke},stroke-width:{width}")
    for name in NODE_KINDS:
        members = [ids[n.id] for n in graph.nodes if n.kind == name]
        if members:
            lines.append(f"  class {','.join(members)} {name}")
    for state in ("changed", "affected"):
        members = [ids[n.id] for n in graph.nodes if n.state == state]
        if members:
            lines.append(f"  class {','.join(members)} {state}")
    if hot:
        lines.append(f"  linkStyle {','.join(hot)} stroke:{_HOT},stroke-width:3px")
    for node in graph.nodes:
        lines.extend(f"  %% {node.label}: {why}" for why in node.reasons)
    return "\n".join(lines) + "\n"


def _dot_text(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _dot_node(node: Node) -> str:
    fill, stroke = COLOURS[node.state or node.kind]
    label = node.label + (f"\n{node.detail}" if node.kind in ("zipapp", "image") else "")
    attrs = {
        "label": label,
        "class": " ".join(filter(None, (node.kind, node.state))),
        "fillcolor": fill,
        "color": stroke,
        "tooltip": "\n".join(node.reasons) or node.detail or node.label,
    }
    if node.state:
        attrs["penwidth"] = "2"
    if node.kind == "library":
        attrs["shape"] = "box"
        attrs["style"] = "filled"
    text = ", ".join(f"{key}={_dot_text(value)}" for key, value in attrs.items())
    return f"{_dot_text(node.id)} [{text}];"


def dot(graph: Graph) -> str:
    """`graph` as a Graphviz digraph, left to right, one cluster per folder."""
    lines = [
        f"digraph {_dot_text(graph.title)} {{",
        "  rankdir=LR;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=11];',
        '  edge [color="#888888"];',
    ]
    for index, (group, nodes) in enumerate(_by_group(graph.nodes).items()):
        if group == ".":
            lines.extend(f"  {_dot_node(n)}" for n in nodes)
            continue
        lines.append(f"  subgraph cluster_{index} {{")
        lines.append(f'    label={_dot_text(group + "/")}; style="rounded"; color="#aaaaaa";')
        lines.extend(f"    {_dot_node(n)}" for n in nodes)
        lines.append("  }")
    for edge in graph.edges:
        attrs = [f"class={_dot_text(edge.kind + (' affected' if edge.affected else ''))}"]
        if edge.label:
            attrs.append(f"label={_dot_text(edge.label)}")
        if edge.kind == "output":
            attrs.append("style=dashed")
        if edge.affected:
            attrs.append(f'color="{_HOT}", penwidth=2')
        lines.append(
            f"  {_dot_text(edge.source)} -> {_dot_text(edge.target)} [{', '.join(attrs)}];"
        )
    lines.append("}")
    return "\n".join(lines) + "\n"
