"""Keeping what a manifest error shows short and safe to print.

A hostile manifest can hold a megabyte-long value, terminal escape sequences, or a
hundred thousand mistakes; the error that reports it must still be a few readable
lines.
"""

from __future__ import annotations

import re

from shipyard.errors import Problem

__all__ = ["MAX_PROBLEMS", "capped", "dotted", "shown"]

# Enough to fix a manifest in one go; more would bury the first one.
MAX_PROBLEMS = 20
_MAX_SHOWN = 60
_SEPARATOR = re.compile(r"[.\[\]]")


def shown(value: object) -> str:
    """`repr(value)`, cut to a readable length: control characters are escaped."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's 4300-digit limit, e.g. from 0xfff...
        return f"a {value.bit_length() if isinstance(value, int) else 'huge'}-bit number"
    if len(text) <= _MAX_SHOWN:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return f"{text[: _MAX_SHOWN - 5]}...{text[-1]}{size}"


def named(value: str) -> str:
    """A name as a message lists it: as it is when short and printable, else `shown`."""
    plain = value.isprintable() and len(value) <= 60 and not set(value) & set("'\", ")
    return value if plain and value else shown(value)


def dotted(path: tuple[str | int, ...]) -> str:
    """A key path as `binaries.app.outputs[0]`: keys joined by dots, list indexes in brackets.

    The one way every manifest problem writes a path. A key that would read as more
    than one part (a dot or bracket in it), or that is long or unprintable, is quoted.
    """
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        plain = len(part) <= _MAX_SHOWN and part.isprintable() and not _SEPARATOR.search(part)
        out += ("." if out else "") + (part if plain and part else shown(part))
    return out


def capped(problems: list[Problem], total: int | None = None) -> list[Problem]:
    """The first MAX_PROBLEMS problems, and a last one saying how many were left out.

    `total` counts problems not even turned into `Problem`s (default: the list's length).
    """
    total = len(problems) if total is None else total
    if total <= MAX_PROBLEMS or not problems:
        return problems
    last = problems[min(MAX_PROBLEMS, len(problems) - 1)]
    return [
        *problems[:MAX_PROBLEMS],
        Problem(
            last.location, "", f"and {total - MAX_PROBLEMS} more problems", "fix the ones above"
        ),
    ]
