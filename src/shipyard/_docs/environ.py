"""The environment variables page, from the one table in the code (`shipyard._environ`)."""

from __future__ import annotations

from shipyard._docs._markdown import code, table
from shipyard._environ import VARIABLES, Scope

__all__ = ["page"]

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
                        code(v.name) + (" *secret*" if v.secret else ""),
                        v.default,
                        v.meaning,
                        ", ".join(code(w) for w in v.read_in),
                    )
                    for v in rows
                ),
            )
        )
    return "\n".join(out)
