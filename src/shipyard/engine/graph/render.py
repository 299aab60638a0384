"""The formats `shipyard graph` writes, and which one a file name asks for."""

from __future__ import annotations

import json
from pathlib import Path

from shipyard.engine.graph.model import Graph
from shipyard.errors import UsageError

__all__ = ["FORMATS", "format_for", "render"]

FORMATS = ("html", "mermaid", "dot", "json")
_SUFFIXES = {
    ".html": "html",
    ".htm": "html",
    ".mmd": "mermaid",
    ".mermaid": "mermaid",
    ".dot": "dot",
    ".gv": "dot",
    ".json": "json",
}


def format_for(given: str | None, out: Path | None) -> str:
    """The format asked for: `given` (--format), else the one `out`'s suffix names
    (-o), else Mermaid on stdout. UsageError (exit 2) for a file name that names none."""
    if given:
        return given
    if out is None:
        return "mermaid"
    found = _SUFFIXES.get(out.suffix.lower())
    if found is None:
        raise UsageError(
            f"-o {out}: cannot tell the format from the name; pass --format="
            + "|".join(FORMATS)
            + " or name the file .html, .mmd, .dot or .json"
        )
    return found


def render(graph: Graph, fmt: str) -> str:
    """`graph` as text in format `fmt` (one of FORMATS)."""
    if fmt == "json":
        return json.dumps(graph.to_json(), indent=2) + "\n"
    if fmt == "mermaid":
        from shipyard.engine.graph.text import mermaid

        return mermaid(graph)
    if fmt == "dot":
        from shipyard.engine.graph.text import dot

        return dot(graph)
    if fmt == "html":
        from shipyard.engine.graph.page import html

        return html(graph)
    raise UsageError(f"--format={fmt}: unknown format; choose from: {', '.join(FORMATS)}")
