"""Where things are in a TOML file, and the error that names the place.

tomllib gives values without positions, so the places of the few things errors point at
(a requirement string, a `[tool.uv.sources]` key, a members entry, a table header) come from
one pass of a small tokenizer over the text. The text has already been parsed by tomllib, so
the pass may assume valid TOML; anything it cannot place falls back to an enclosing table.
"""

from __future__ import annotations

import bisect
import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shipyard.errors import UsageError

__all__ = ["Positions", "TomlFile", "Where", "WorkspaceError"]

Key = tuple[str | int, ...]


class Where:
    """A place in a file: 1-based line and column; `root` only shortens what `str()` shows.

    A place in a TOML file is found when first read (`TomlFile.where`): the loader
    notes the place of every requirement and problem, and a build reads almost none.
    Equal and hashed by (path, line, col), as a frozen dataclass would be."""

    __slots__ = ("_col", "_find", "_line", "path", "root")

    def __init__(
        self,
        path: Path,
        line: int = 1,
        col: int = 1,
        root: Path | None = None,
        *,
        find: Callable[[], tuple[int, int]] | None = None,
    ) -> None:
        self.path = path
        self._line = line
        self._col = col
        self.root = root
        self._find = find

    def _place(self) -> tuple[int, int]:
        if self._find is not None:
            self._line, self._col = self._find()
            self._find = None
        return self._line, self._col

    @property
    def line(self) -> int:
        """The 1-based line."""
        return self._place()[0]

    @property
    def col(self) -> int:
        """The 1-based column."""
        return self._place()[1]

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Where)
        return (self.path, *self._place()) == (other.path, *other._place())

    def __hash__(self) -> int:
        return hash((self.path, *self._place()))

    def __repr__(self) -> str:
        return f"Where(path={self.path!r}, line={self.line!r}, col={self.col!r})"

    def __str__(self) -> str:
        path = self.path
        if self.root is not None and path.is_relative_to(self.root):
            path = path.relative_to(self.root)
        return f"{path}:{self.line}:{self.col}"


class WorkspaceError(UsageError):
    """A pyproject.toml or uv.lock the workspace cannot be built from (exit 2).

    `str()` is "PATH:LINE:COL: problem; the fix", put together when first shown (the
    loader records problems of test fixtures that no build asks about)."""

    def __init__(self, where: Where, problem: str, fix: str) -> None:
        self.where = where
        self.problem = problem
        self.fix = fix
        super().__init__()

    def __str__(self) -> str:
        return f"{self.where}: {self.problem}; {self.fix}"


_TOKEN = re.compile(
    r"""
      (?P<nl>\n)
    | (?P<ws>[ \t\r]+)
    | (?P<comment>\#[^\n]*)
    | (?P<str>\"\"\"(?:[^\\]|\\[\s\S])*?\"\"\"\"{0,2}
             | '''[\s\S]*?''''{0,2}
             | "(?:[^"\\\n]|\\.)*"
             | '[^'\n]*')
    | (?P<punct>[\[\]{}=,.])
    | (?P<bare>[^\s\[\]{}=,.\#"']+)
    """,
    re.VERBOSE,
)
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)")
_SIMPLE = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


def _key_text(token: str) -> str:
    if token.startswith("'"):
        return token[1:-1]
    if token.startswith('"'):

        def one(m: re.Match[str]) -> str:
            c = m.group(1)
            return chr(int(c[1:], 16)) if c[0] in "uU" else _SIMPLE.get(c, c)

        return _ESCAPE.sub(one, token[1:-1])
    return token


class Positions:
    """The (line, column) of every key and value of one TOML text, by path.

    Paths are tuples of keys and array indices: ("project", "dependencies", 2) is the third
    requirement; arrays of tables count their entries like arrays."""

    def __init__(self, text: str) -> None:
        self._starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.keys: dict[Key, int] = {}
        self.values: dict[Key, int] = {}
        self.headers: dict[Key, int] = {}
        self._tokens = [
            (m.lastgroup or "", m.group(), m.start())
            for m in _TOKEN.finditer(text)
            if m.lastgroup not in ("ws", "comment")
        ]
        self._i = 0
        # Text tomllib accepted but this pass cannot follow (or nesting deeper than the
        # stack left here allows) ends it: what was found is kept.
        with contextlib.suppress(IndexError, RecursionError):
            self._document()

    def at(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a character offset."""
        line = bisect.bisect_right(self._starts, offset)
        return line, offset - self._starts[line - 1] + 1

    def find(self, *paths: Key, key: bool = False) -> tuple[int, int]:
        """The place of the first path known, as a value, a key or a table header (the key
        first with `key`); else 1:1."""
        tables = (self.keys, self.values) if key else (self.values, self.keys)
        for path in paths:
            for table in (*tables, self.headers):
                if path in table:
                    return self.at(table[path])
        return 1, 1

    # The tokenizer's grammar: statements are headers or `key = value`; values nest.

    def _peek(self) -> tuple[str, str, int]:
        return self._tokens[self._i]

    def _skip_newlines(self) -> None:
        while self._i < len(self._tokens) and self._tokens[self._i][0] == "nl":
            self._i += 1

    def _document(self) -> None:
        table: Key = ()
        arrays: dict[Key, int] = {}
        while True:
            self._skip_newlines()
            if self._i >= len(self._tokens):
                return
            _, text, offset = self._peek()
            if text == "[":
                double = self._tokens[self._i + 1][1] == "[" and (
                    self._tokens[self._i + 1][2] == offset + 1
                )
                self._i += 2 if double else 1
                name = self._key()
                self._i += 2 if double else 1
                if double:
                    index = arrays.get(name, -1) + 1
                    arrays[name] = index
                    table = (*name, index)
                else:
                    table = name
                self.headers.setdefault(table, offset)
            else:
                self._pair(table)

    def _key(self) -> Key:
        parts: list[str | int] = []
        while True:
            _, text, _ = self._peek()
            parts.append(_key_text(text))
            self._i += 1
            if self._peek()[1] != ".":
                return tuple(parts)
            self._i += 1

    def _pair(self, table: Key) -> None:
        offset = self._peek()[2]
        path = (*table, *self._key())
        self.keys.setdefault(path, offset)
        self._i += 1  # "="
        self._value(path)

    def _value(self, path: Key) -> None:
        kind, text, offset = self._peek()
        self.values.setdefault(path, offset)
        if text == "[":
            self._i += 1
            index = 0
            while True:
                self._skip_newlines()
                if self._peek()[1] == "]":
                    self._i += 1
                    return
                if self._peek()[1] == ",":
                    self._i += 1
                    continue
                self._value((*path, index))
                index += 1
        elif text == "{":
            self._i += 1
            while True:
                token = self._peek()[1]
                if token == "}":
                    self._i += 1
                    return
                if token == ",":
                    self._i += 1
                    continue
                self._pair(path)
        elif kind == "str":
            self._i += 1
        else:  # numbers, booleans, dates (which may hold "." and a space): up to a delimiter
            while self._peek()[0] != "nl" and self._peek()[1] not in ",]}":
                self._i += 1


@dataclass
class TomlFile:
    """One parsed TOML file; the places of its keys are found when first asked for."""

    path: Path
    data: dict[str, Any]
    text: str
    _positions: Positions | None = field(default=None, repr=False)

    @property
    def positions(self) -> Positions:
        """The places of every key and value (one tokenizer pass, done once)."""
        if self._positions is None:
            self._positions = Positions(self.text)
        return self._positions

    def where(self, *paths: Key, root: Path | None = None, key: bool = False) -> Where:
        """The place of the first of `paths` found (see `Positions.find`), looked up
        when first read."""
        return Where(self.path, root=root, find=lambda: self.positions.find(*paths, key=key))
