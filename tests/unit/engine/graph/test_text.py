"""Mermaid and DOT: read back line by line (Mermaid) and by Graphviz itself (DOT)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from shipyard.engine.graph import Graph, render
from shipyard.engine.graph.model import Edge, Node
from tests.unit.engine.graph._acme import graph_of

NODE = re.compile(r'^\s+(\w+)(\(\["|\[\["|\["|\[/")(.*?)("\]\)|"\]\]|"\]|"/\])$')
EDGE = re.compile(r"^\s+(\w+) (-->|-\.->)(?:\|([^|]*)\|)? (\w+)$")


def parse_mermaid(
    text: str,
) -> tuple[dict[str, str], list[tuple[str, str, str]], dict[str, set[str]]]:
    """Mermaid's nodes (id -> label), edges and classes (class -> ids); fails on a line
    that is none of the statements the writer makes."""
    lines = text.splitlines()
    assert lines[0] == "flowchart LR"
    nodes: dict[str, str] = {}
    edges: list[tuple[str, str, str]] = []
    classes: dict[str, set[str]] = {}
    defined: set[str] = set()
    depth = 0
    styled: list[int] = []
    for line in lines[1:]:
        if node := NODE.match(line):
            assert node[1] not in nodes, f"defined twice: {line}"
            nodes[node[1]] = node[3]
        elif edge := EDGE.match(line):
            edges.append((edge[1], edge[4], edge[3] or ""))
        elif line.startswith("  subgraph "):
            depth += 1
        elif line == "  end":
            depth -= 1
        elif line.startswith("  classDef "):
            defined.add(line.split()[1])
        elif line.startswith("  class "):
            _, ids, name = line.split()
            assert name in defined, f"class {name} used before its classDef"
            classes.setdefault(name, set()).update(ids.split(","))
        elif line.startswith("  linkStyle "):
            styled += [int(i) for i in line.split()[1].split(",")]
        else:
            assert line.startswith("  %% "), f"not a statement the writer makes: {line!r}"
        assert depth in (0, 1)
    assert depth == 0
    for source, target, _ in edges:
        assert source in nodes and target in nodes, (source, target)
    assert all(ids <= nodes.keys() for ids in classes.values())
    assert all(0 <= i < len(edges) for i in styled)
    classes["<linkStyle>"] = {f"{edges[i][0]}->{edges[i][1]}" for i in styled}
    return nodes, edges, classes


def test_mermaid_defines_every_node_once_and_every_edge_joins_two(template: Path) -> None:
    graph = graph_of(template)
    nodes, edges, classes = parse_mermaid(render(graph, "mermaid"))
    assert sorted(nodes.values()) == sorted(n.label for n in graph.nodes)
    assert len(edges) == len(graph.edges)
    assert ("project_acme_cli", "project_acme_extra", "plus") in edges
    assert classes["library"] == {
        "project_acme_api",
        "project_acme_extra",
        "project_acme_model",
        "project_acme_unused",
    }
    assert "changed" not in classes and classes["<linkStyle>"] == set()


def test_mermaid_marks_what_changed_and_what_it_affects(acme: Path) -> None:
    (acme / "libs/api/acme_api/__init__.py").write_text("Z = 3\n")
    text = render(graph_of(acme, since="HEAD"), "mermaid")
    _, _, classes = parse_mermaid(text)
    assert classes["changed"] == {"project_acme_api"}
    assert classes["affected"] == {
        "project_acme_cli",
        "binary_cli",
        "binary_cli_docker",
        "wheel_apps_cli",
        "zipapp_cli",
        "image_cli",
        "image_cli_docker",
    }
    assert "project_acme_cli->project_acme_api" in classes["<linkStyle>"]
    assert "binary_solo->wheel_apps_solo" not in classes["<linkStyle>"]
    assert "%% cli: libs/api/acme_api/__init__.py changed (through acme-api)" in text


def test_mermaid_ids_stay_unique_and_labels_quoted() -> None:
    graph = Graph(
        'the "x"',
        (
            Node("project:a-b", "library", 'say "hi"', "."),
            Node("project:a.b", "project", "end", "."),
        ),
        (Edge("project:a.b", "project:a-b", "needs"),),
    )
    nodes, edges, _ = parse_mermaid(render(graph, "mermaid"))
    assert nodes == {"project_a_b": "say #quot;hi#quot;", "project_a_b_2": "end"}
    assert edges == [("project_a_b_2", "project_a_b", "")]


def _dot() -> str:
    found = shutil.which("dot")
    if found is None:
        if os.environ.get("SHIPYARD_REQUIRE_SERVICES"):
            pytest.fail("Graphviz's dot is not installed (make services installs graphviz)")
        pytest.skip("Graphviz's dot is not installed (apt-get install graphviz)")
    return found


def svg_of(text: str) -> ET.Element:
    """Graphviz's SVG of the DOT `text` (it must accept it without a warning)."""
    done = subprocess.run(
        [_dot(), "-Tsvg"], input=text, capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    return ET.fromstring(done.stdout)


SVG = "{http://www.w3.org/2000/svg}"


def test_graphviz_draws_every_node_edge_and_folder(acme: Path) -> None:
    (acme / "libs/model/acme_model/__init__.py").write_text("X = 2\n")
    graph = graph_of(acme, since="HEAD")
    root = svg_of(render(graph, "dot"))
    groups: dict[str, list[tuple[str, list[str]]]] = {}
    folders: list[str] = []
    for g in root.iter(f"{SVG}g"):
        title = g.find(f"{SVG}title")
        kind = (g.get("class") or "").split()
        if title is not None and kind:
            groups.setdefault(kind[0], []).append((title.text or "", kind[1:]))
        if kind[:1] == ["cluster"]:
            folders += [t.text or "" for t in g.iter(f"{SVG}text")]
    assert sorted(t for t, _ in groups["node"]) == sorted(n.id for n in graph.nodes)
    assert len(groups["edge"]) == len(graph.edges)
    assert sorted(folders) == ["apps/", "libs/", "tools/"]
    classes = dict(groups["node"])
    assert "changed" in classes["project:acme-model"]
    assert "affected" in classes["binary:cli"]
    assert "affected" not in classes["binary:solo"]


def test_dot_quotes_what_it_writes() -> None:
    graph = Graph(
        'a "b"\\c',
        (Node('project:"x"', "library", 'say "hi"\\', "a/b", reasons=("line\nnext",)),),
        (),
    )
    root = svg_of(render(graph, "dot"))
    titles = [t.text for t in root.iter(f"{SVG}title")]
    assert 'project:"x"' in titles
