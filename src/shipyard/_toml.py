"""Reading TOML from the user's repository: one parser call, and what it may not throw.

tomllib descends one Python frame per level of nesting, so a value nested a few hundred
levels deep (`x = [[[[...]]]]`) raises RecursionError, and a huge file MemoryError:
neither is an error a caller expects from a parser. Here both become the
`tomllib.TOMLDecodeError` every caller already turns into "FILE:LINE:COL is not valid
TOML", with the place the nesting gets deep.

The parser is tomli's compiled build where it is installed (a dependency of shipyard:
the same parser as tomllib, whose source it is, compiled by mypyc, about three times
faster on a large uv.lock, which a no-op build reads on every start), else tomllib.
Both give the same values; tomli's errors are raised as tomllib's, so callers catch
one type.
"""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Callable
from typing import Any

__all__ = ["NESTING", "loads"]

NESTING = 100
"""The depth of arrays and inline tables an error points at: far beyond any real file."""

# Strings and comments (whose brackets do not nest anything), and the brackets that do.
_SCAN = re.compile(
    r"""
      \"\"\"(?:[^\\]|\\[\s\S])*?\"\"\"\"{0,2}
    | '''[\s\S]*?''''{0,2}
    | "(?:[^"\\\n]|\\.)*"
    | '[^'\n]*'
    | \#[^\n]*
    | (?P<open>[\[{])
    | (?P<close>[\]}])
    """,
    re.VERBOSE,
)


def _deep(text: str) -> int | None:
    """The offset of the first bracket that opens level NESTING + 1, if any."""
    depth = 0
    for match in _SCAN.finditer(text):
        if match.lastgroup == "open":
            depth += 1
            if depth > NESTING:
                return match.start()
        elif match.lastgroup == "close":
            depth = max(depth - 1, 0)
    return None


def _error(text: str, problem: str, offset: int) -> tomllib.TOMLDecodeError:
    """A TOMLDecodeError worded as tomllib words its own: "PROBLEM (at line L, column C)"."""
    if sys.version_info >= (3, 14):
        return tomllib.TOMLDecodeError(problem, text, offset)
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return tomllib.TOMLDecodeError(f"{problem} (at line {line}, column {column})")


def _parser() -> tuple[Callable[[str], dict[str, Any]], type[ValueError]]:
    """tomli's loads and error when tomli is compiled, else tomllib's."""
    try:
        import tomli
    except ImportError:
        return tomllib.loads, tomllib.TOMLDecodeError
    if not tomli._parser.__file__.endswith(".py"):  # compiled: the point of using it
        return tomli.loads, tomli.TOMLDecodeError
    return tomllib.loads, tomllib.TOMLDecodeError


_parse, _ParseError = _parser()


def _same(error: ValueError) -> tomllib.TOMLDecodeError:
    """tomli's TOMLDecodeError as tomllib's, with the same message."""
    if sys.version_info >= (3, 14):
        msg, doc, pos = (getattr(error, name) for name in ("msg", "doc", "pos"))
        return tomllib.TOMLDecodeError(msg, doc, pos)
    return tomllib.TOMLDecodeError(str(error))


def loads(text: str) -> dict[str, Any]:
    """`tomllib.loads(text)`; nesting too deep for the parser, or a file too large for
    memory, raises `tomllib.TOMLDecodeError` (placed where the nesting passes NESTING
    levels) instead of RecursionError or MemoryError."""
    try:
        return _parse(text)
    except tomllib.TOMLDecodeError:
        raise
    except _ParseError as error:  # tomli's own type: raised as tomllib's, same words
        raise _same(error) from None
    except RecursionError:
        pass  # out of the except block first: the scan runs on a shallow stack
    except MemoryError:
        raise _error(text, "too large to read", 0) from None
    offset = _deep(text)
    if offset is None:
        raise _error(text, "values nested too deeply to read", 0) from None
    raise _error(
        text,
        f"values nested more than {NESTING} levels deep (flatten them: nothing needs this depth)",
        offset,
    ) from None
