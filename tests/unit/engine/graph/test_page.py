"""The HTML page: self-contained (nothing fetched), its data whole, its columns."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

from shipyard.engine.graph import Graph, render
from shipyard.engine.graph.model import Edge, Node
from shipyard.engine.graph.page import columns
from tests.unit.engine.graph._acme import graph_of


class _Page(HTMLParser):
    """Every tag's attributes, and the text of each <script> by its id."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.scripts: list[tuple[dict[str, str], str]] = []
        self._in: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        self.tags.append((tag, found))
        if tag == "script":
            self._in = found
            self.scripts.append((found, ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)


def page_of(graph: Graph) -> tuple[str, _Page, dict[str, object]]:
    """The page's text, its parse, and the graph data it carries."""
    text = render(graph, "html")
    page = _Page()
    page.feed(text)
    (data,) = [t for attrs, t in page.scripts if attrs.get("id") == "graph-data"]
    return text, page, json.loads(data)


def test_the_page_fetches_nothing(template: Path) -> None:
    text, page, _ = page_of(graph_of(template))
    assert not re.search(r"https?:", text, re.IGNORECASE)  # no URL at all, not only in src=
    assert "//" not in "".join(v for _, attrs in page.tags for v in attrs.values())
    for tag, attrs in page.tags:
        for key in ("src", "href", "xlink:href", "srcset", "action", "data"):
            assert attrs.get(key, "data:").startswith("data:"), (tag, attrs)
        assert not (tag == "link" and attrs.get("rel") == "stylesheet"), attrs
    assert not re.search(r"@import|url\(\s*['\"]?(?!#)", text)  # CSS fetching nothing either
    scripts = [attrs for attrs, _ in page.scripts]
    assert scripts == [{"type": "application/json", "id": "graph-data"}, {}]
    assert "function layout()" in page.scripts[1][1]  # the script inlined, page.js


def test_the_page_has_the_search_box_and_every_node_and_edge(template: Path) -> None:
    graph = graph_of(template)
    _, page, data = page_of(graph)
    assert (
        "input",
        {
            "type": "search",
            "id": "search",
            "placeholder": "search projects, binaries, outputs",
            "aria-label": "search",
        },
    ) in page.tags
    rows = data["nodes"]
    assert isinstance(rows, list)
    assert sorted(r[0] for r in rows) == sorted(n.id for n in graph.nodes)
    edges = data["edges"]
    assert isinstance(edges, list) and len(edges) == len(graph.edges)
    ids = [r[0] for r in rows]
    assert {(ids[e[0]], ids[e[1]]) for e in edges} == {(e.source, e.target) for e in graph.edges}


def test_data_cannot_end_its_script_early() -> None:
    evil = "</script><script>alert(1)</script>"
    graph = Graph("t", (Node("project:x", "library", evil, ".", reasons=(evil,)),), ())
    text, _, data = page_of(graph)
    assert text.count("</script>") == 2
    assert data["nodes"] == [["project:x", "library", evil, ".", "", "", [evil], 0]]


def test_libraries_by_depth_then_projects_binaries_outputs(template: Path) -> None:
    found, heads = columns(graph_of(template))
    assert heads == ["libraries", "libraries", "projects", "binaries", "outputs"]
    assert found["project:acme-model"] == found["project:acme-extra"] == 0
    assert found["project:acme-api"] == found["project:acme-unused"] == 1
    assert found["project:acme-cli"] == 2 and found["binary:cli"] == 3
    assert found["image:cli"] == found["wheel:apps/cli"] == 4


def test_a_deep_library_chain_shares_the_last_library_column() -> None:
    nodes = tuple(Node(f"project:l{i}", "library", f"l{i}", ".") for i in range(7))
    edges = tuple(Edge(f"project:l{i + 1}", f"project:l{i}", "needs") for i in range(6))
    cycle = (Edge("project:l0", "project:l6", "needs"),)  # a cycle ends, at depth 0
    found, heads = columns(Graph("t", nodes, edges))
    assert heads[-3:] == ["projects", "binaries", "outputs"] and len(heads) == 7
    assert [found[f"project:l{i}"] for i in range(7)] == [0, 1, 2, 3, 3, 3, 3]
    found, _ = columns(Graph("t", nodes, edges + cycle))
    assert max(found.values()) == 3


def test_since_puts_the_state_and_reasons_in_the_data_and_the_legend(acme: Path) -> None:
    (acme / "libs/extra/acme_extra/__init__.py").write_text("E = 1\n")
    text, _, data = page_of(graph_of(acme, since="HEAD"))
    rows = {r[0]: r for r in data["nodes"]}  # type: ignore[attr-defined]
    assert rows["project:acme-extra"][5] == "changed"
    assert rows["binary:cli"][5] == "affected"
    assert rows["binary:cli"][6] == [
        "libs/extra/acme_extra/__init__.py changed (through acme-extra)"
    ]
    assert rows["binary:cli-docker"][5] == ""  # without the extra `plus`
    assert data["since"] == "HEAD"
    assert '<i class="swatch-changed"></i>changed' in text


def test_rows_read_numbers_as_numbers_and_keep_binaries_by_their_project() -> None:
    nodes = (
        Node("project:p10", "project", "p10", "projects"),
        Node("project:p9", "project", "p9", "projects"),
        Node("binary:a-of-p10", "binary", "a-of-p10", "projects"),
        Node("binary:z-of-p9", "binary", "z-of-p9", "projects"),
        Node("zipapp:a-of-p10", "zipapp", "zipapp a-of-p10", "projects"),
        Node("wheel:projects/p10", "wheel", "wheel p10", "projects"),
    )
    edges = (
        Edge("binary:a-of-p10", "project:p10", "source"),
        Edge("binary:z-of-p9", "project:p9", "source"),
        Edge("binary:a-of-p10", "zipapp:a-of-p10", "output"),
        Edge("binary:a-of-p10", "wheel:projects/p10", "output"),
    )
    _, _, data = page_of(Graph("t", nodes, edges))
    assert [r[0] for r in data["nodes"]] == [  # type: ignore[attr-defined]
        "project:p9",
        "project:p10",
        "binary:z-of-p9",  # level with p9, before a-of-p10
        "binary:a-of-p10",
        "wheel:projects/p10",  # wheel, zipapp, image
        "zipapp:a-of-p10",
    ]
