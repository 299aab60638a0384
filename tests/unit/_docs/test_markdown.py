"""Table cells and inline code stay one valid Markdown cell whatever the text holds."""

from __future__ import annotations

from shipyard._docs._markdown import cell, code, table


def test_a_cell_is_one_line_with_its_pipes_escaped() -> None:
    assert cell("a |\n b") == "a \\| b"
    assert cell("") == "—"


def test_code_with_a_backtick_gets_a_longer_fence() -> None:
    assert code("x") == "`x`"
    assert code("a`b") == "``a`b``"
    assert code("`a") == "`` `a ``"


def test_a_table_has_one_row_per_item() -> None:
    assert table(("k", "v"), [("a", 1), ("b", "")]) == (
        "| k | v |\n|---|---|\n| a | 1 |\n| b | — |\n"
    )
