"""`${VAR}` / `${VAR:-default}` expansion: shipyard.manifest._expand.expand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shipyard.errors import ManifestError, Problem
from shipyard.manifest._expand import expand
from shipyard.manifest._yaml import Positions, load_yaml

FILE = Path("/repo/binaries.yaml")


def _one(text: str, env: dict[str, str]) -> Any:
    """Expand one string with no positions recorded."""
    return expand({"v": text}, env, Positions(FILE))["v"]


def _problems(yaml_text: str, env: dict[str, str]) -> list[Problem]:
    value, positions = load_yaml(FILE, yaml_text.encode())
    with pytest.raises(ManifestError) as info:
        expand(value, env, positions)
    return list(info.value.problems)


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        pytest.param("${A}", {"A": "x"}, "x", id="plain"),
        pytest.param("pre-${A}-post", {"A": "x"}, "pre-x-post", id="embedded"),
        pytest.param("${A}${B}", {"A": "1", "B": "2"}, "12", id="adjacent"),
        pytest.param("${A}/${A}", {"A": "x"}, "x/x", id="twice"),
        pytest.param("${_a9}", {"_a9": "ok"}, "ok", id="underscore-lower-digit"),
        pytest.param("${A}", {"A": ""}, "", id="set-but-empty"),
        pytest.param("${A:-d}", {}, "d", id="default"),
        pytest.param("${A:-d}", {"A": "e"}, "e", id="env-wins-over-default"),
        pytest.param("${A:-}", {}, "", id="empty-default"),
        pytest.param("${HUB:-127.0.0.1:5000/mesh}", {}, "127.0.0.1:5000/mesh", id="colons"),
        pytest.param("${A:-a b -c}", {}, "a b -c", id="default-with-spaces"),
        pytest.param("${A:-x}}", {}, "x}", id="default-ends-at-first-brace"),
        pytest.param("$$", {}, "$", id="escape"),
        pytest.param("a$$b", {}, "a$b", id="escape-inside"),
        pytest.param("$${A}", {"A": "x"}, "${A}", id="escaped-reference-stays-literal"),
        pytest.param("$$$${A}", {"A": "x"}, "$${A}", id="two-escapes"),
        pytest.param("$$${A}", {"A": "x"}, "$x", id="escape-then-reference"),
        pytest.param("cost $5", {}, "cost $5", id="lone-dollar"),
        pytest.param("$A", {"A": "x"}, "$A", id="no-braces-no-expansion"),
        pytest.param("no refs", {"A": "x"}, "no refs", id="nothing"),
    ],
)
def test_expands(text: str, env: dict[str, str], expected: str) -> None:
    assert _one(text, env) == expected


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        pytest.param("${A:-$B}", {"B": "x"}, "$B", id="dollar-in-default"),
        pytest.param("${A:-${B}", {"B": "x"}, "${B", id="reference-in-default"),
        pytest.param("${A}", {"A": "${B}", "B": "x"}, "${B}", id="reference-in-value"),
        pytest.param("${A}", {"A": "${A}"}, "${A}", id="self-reference"),
        pytest.param("${A}", {"A": "$$"}, "$$", id="escape-in-value"),
        pytest.param("${A:-${A:-${A}}}", {}, "${A:-${A}}", id="nested-defaults"),
    ],
)
def test_substituted_text_is_not_expanded_again(
    text: str, env: dict[str, str], expected: str
) -> None:
    """Defaults and values are literal: one pass, so no loops are possible."""
    assert _one(text, env) == expected


def test_walks_lists_and_mappings_and_leaves_other_values() -> None:
    value: dict[str, Any] = {
        "${KEY}": "${A}",
        "list": ["${A}", 1, 2.5, True, None, {"deep": ["${A:-d}"]}],
        "n": 3,
    }
    expanded = expand(value, {"A": "x"}, Positions(FILE))
    assert expanded == {
        "${KEY}": "x",
        "list": ["x", 1, 2.5, True, None, {"deep": ["x"]}],
        "n": 3,
    }
    assert value["list"][0] == "${A}", "the input is not changed"


def test_unset_without_default_names_variable_and_fix() -> None:
    [problem] = _problems("base: ${BASE}\n", {})
    assert problem.path == "base"
    assert problem.message == "environment variable BASE is not set"
    assert problem.hint == "set BASE, or give a default: ${BASE:-value}"
    assert (problem.location.file, problem.location.line, problem.location.column) == (
        FILE,
        1,
        7,
    )


def test_every_unset_variable_is_reported_together() -> None:
    problems = _problems(
        "image:\n"
        "  base: reg/${ORG}/py:${PY}\n"
        "  tags: [latest, '${TAG}']\n"
        "  hubs:\n"
        "    - ${HUB:-hub}\n"
        "    - ${MIRROR}\n",
        {"PY": "3.11"},
    )
    assert [(p.path, p.message, p.location.line, p.location.column) for p in problems] == [
        ("image.base", "environment variable ORG is not set", 2, 13),
        ("image.tags[1]", "environment variable TAG is not set", 3, 18),
        ("image.hubs[1]", "environment variable MIRROR is not set", 6, 7),
    ]


def test_two_unset_in_one_plain_scalar_point_at_each_dollar() -> None:
    problems = _problems("tag: ${A}-${B}\n", {})
    assert [(p.message, p.location.column) for p in problems] == [
        ("environment variable A is not set", 6),
        ("environment variable B is not set", 11),
    ]


def test_quoted_or_multiline_scalar_points_at_its_start() -> None:
    """Column offsets are only exact in plain one-line scalars; else the value's start."""
    problems = _problems('a: "x ${A}"\nb: >-\n  folded\n  ${B}\n', {})
    assert [(p.path, p.location.line, p.location.column) for p in problems] == [
        ("a", 1, 4),
        ("b", 2, 4),
    ]


@pytest.mark.parametrize(
    ("text", "column", "message"),
    [
        pytest.param("v: ab${X\n", 6, "unclosed '${'", id="unclosed"),
        pytest.param("v: ${\n", 4, "unclosed '${'", id="bare-open"),
        pytest.param("v: ${}\n", 4, "'${}' is not a variable reference", id="empty-name"),
        pytest.param("v: ${1X}\n", 4, "'${1X}' is not a variable reference", id="digit-first"),
        pytest.param("v: x${A-B}\n", 5, "'${A-B}' is not a variable reference", id="dash"),
        pytest.param("v: ${A B}\n", 4, "'${A B}' is not a variable reference", id="space"),
    ],
)
def test_malformed_references(text: str, column: int, message: str) -> None:
    [problem] = _problems(text, {"X": "x", "A": "a"})
    assert problem.message == message
    assert problem.path == "v"
    assert (problem.location.line, problem.location.column) == (1, column)
    assert problem.hint


def test_shell_operator_other_than_default_is_named() -> None:
    [problem] = _problems("v: ${A:=x}\n", {})
    assert problem.message == "'${A:=x}' is not a variable reference"


def test_malformed_and_unset_are_reported_together() -> None:
    problems = _problems("a: ${1X}\nb: ${UNSET}\nc: ${OK:-fine}\nd: $${LITERAL}\n", {})
    assert [p.path for p in problems] == ["a", "b"]
