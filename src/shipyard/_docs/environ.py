"""The environment variables page, from the one table in the code (`shipyard._environ`)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from shipyard._docs._markdown import code, table
from shipyard._environ import VARIABLES, Scope, documented
from shipyard.process import is_secret

__all__ = ["mentioned", "page", "undocumented"]

_NAME = re.compile(r"SHIPYARD_[A-Z0-9_]+")
_SRC = Path(__file__).resolve().parents[2]  # src/


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of the string constants of `tree` (f-strings' literal parts too),
    leaving out the names listed in `__all__` (an exported constant named like a
    variable is none)."""
    exported: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            exported |= {id(c) for c in ast.walk(node.value)}
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in exported
    ]


def mentioned(src: Path = _SRC) -> dict[str, str]:
    """Every `SHIPYARD_*` name in a string of the Python files under `src` (code,
    messages, docstrings), with the first `file:line` that has it."""
    found: dict[str, str] = {}
    for path in sorted(src.rglob("*.py")):
        if path.name == "_environ.py" and path.parent.name == "shipyard":
            continue  # the table itself
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, text in _strings(tree):
            for name in _NAME.findall(text):
                found.setdefault(name, f"{path.relative_to(src.parent)}:{line}")
    return found


def undocumented(src: Path = _SRC) -> list[str]:
    """`NAME (file:line)` of each name under `src` that no row of the table documents."""
    return [f"{n} ({where})" for n, where in sorted(mentioned(src).items()) if not documented(n)]


_SECTIONS: tuple[tuple[Scope, str, str], ...] = (
    ("shipyard", "Read by shipyard", "Set them in the shell or CI job that runs shipyard."),
    (
        "zipapp",
        "Read by a zipapp shipyard built",
        "Set them where the zipapp runs; shipyard itself never reads them.",
    ),
    (
        "set",
        "Set by shipyard for what it runs",
        "A build step or a test stage's command may read them.",
    ),
    (
        "tests",
        "Read by shipyard's own test suite",
        "For contributors: scripts/services.sh and the nox sessions set most of them.",
    ),
)


def page() -> str:
    """docs/reference/environment.md."""
    out = [
        "# Environment variables\n",
        "Generated from `shipyard._environ.VARIABLES`, the table the code reads the "
        "names from. `<HOST>` stands for a registry's host and port upper-cased, every "
        "other character turned into `_`: `127.0.0.1:5000` is `127_0_0_1_5000`. "
        "Variables marked *secret* are never passed to a build step or a test stage.\n",
    ]
    for scope, title, intro in _SECTIONS:
        rows = [v for v in VARIABLES if v.scope == scope]
        out.append(f"## {title}\n\n{intro}\n")
        out.append(
            table(
                ("variable", "default", "meaning", "read in"),
                (
                    (
                        code(v.name) + (" *secret*" if is_secret(v.name) else ""),
                        v.default,
                        v.meaning,
                        ", ".join(code(w) for w in v.read_in),
                    )
                    for v in rows
                ),
            )
        )
    return "\n".join(out)
