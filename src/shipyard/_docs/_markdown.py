"""Markdown pieces the generated reference pages are made of: tables and inline code."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["cell", "code", "table"]


def cell(text: object) -> str:
    """`text` fit for one table cell: one line, pipes escaped, "" as an em dash."""
    line = " ".join(str(text).split())
    return line.replace("|", "\\|") if line else "—"


def code(text: object) -> str:
    """`text` as inline code, with a fence long enough for backticks inside it."""
    value = str(text)
    fence = "``" if "`" in value else "`"
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table of `rows` under `header`, each value a cell."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
