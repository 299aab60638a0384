"""Which format a file name asks for, and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shipyard.engine.graph import FORMATS, format_for, render
from shipyard.errors import UsageError
from tests.unit.engine.graph._acme import graph_of


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("g.html", "html"),
        ("G.HTM", "html"),
        ("g.mmd", "mermaid"),
        ("g.dot", "dot"),
        ("g.gv", "dot"),
        ("g.json", "json"),
    ],
)
def test_the_suffix_names_the_format(name: str, fmt: str) -> None:
    assert format_for(None, Path(name)) == fmt


def test_format_wins_and_stdout_is_mermaid() -> None:
    assert format_for("dot", Path("g.html")) == "dot"
    assert format_for(None, None) == "mermaid"


def test_a_name_naming_no_format_is_refused_with_the_fix() -> None:
    with pytest.raises(UsageError, match=r"-o graph.txt: .*pass --format=html\|mermaid\|dot\|json"):
        format_for(None, Path("graph.txt"))


def test_json_is_the_graph(template: Path) -> None:
    graph = graph_of(template)
    data = json.loads(render(graph, "json"))
    assert data["title"] == "acme" and data["since"] is None
    assert [n["id"] for n in data["nodes"]] == [n.id for n in graph.nodes]
    assert data["edges"][0] == graph.edges[0].to_json()


def test_every_format_renders(template: Path) -> None:
    graph = graph_of(template)
    assert all(render(graph, fmt).strip() for fmt in FORMATS)
    with pytest.raises(UsageError, match="--format=svg"):
        render(graph, "svg")
