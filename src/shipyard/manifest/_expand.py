"""`${VAR}` and `${VAR:-default}` expansion over the manifest's string values."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from shipyard.errors import Location, ManifestError, Problem
from shipyard.manifest._report import MAX_PROBLEMS, capped, dotted, shown
from shipyard.manifest._yaml import KeyPath, Positions

__all__ = ["expand", "expand_all"]

# ${NAME} or ${NAME:-default}; "$$" writes a literal "$". The default is literal
# text: no nested expansion, so no expansion loops are possible. Any other closed
# ${...} is reported as such; a "${" with no "}" after it as unclosed. A hand-written
# scan rather than one regular expression: a value of many unclosed "${" made the
# expression try every one of them to the end of the text (quadratic time).
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Each target Python (project.python), in image bases only: see _is_base.
_PYTHON = "${python}"


def _is_base(path: KeyPath) -> bool:
    """Whether `path` is an image's base or an image variant's base."""
    return len(path) >= 2 and path[-1] == "base" and "image" in path


class _Expansion:
    """Expands one string, adding a problem for each bad or unset reference."""

    def __init__(
        self,
        env: Mapping[str, str],
        path: KeyPath,
        positions: Positions,
        problems: list[tuple[KeyPath, Problem]],
    ) -> None:
        self.env = env
        self.path = path
        self.positions = positions
        self.problems = problems

    def _where(self, offset: int) -> Location:
        node = self.positions.node(self.path)
        if node.plain:
            return Location(node.value.file, node.value.line, node.value.column + offset)
        return node.value

    def _problem(self, offset: int, message: str, hint: str) -> None:
        problem = Problem(self._where(offset), dotted(self.path), message, hint)
        self.problems.append((self.path, problem))

    def run(self, text: str) -> str:
        out: list[str] = []
        i = 0
        while (start := text.find("$", i)) >= 0 and len(self.problems) <= MAX_PROBLEMS:
            out.append(text[i:start])
            if text.startswith("$$", start):
                out.append("$")
                i = start + 2
            elif not text.startswith("${", start):
                out.append("$")
                i = start + 1
            else:
                end = self._end(text, start)
                if end < 0:
                    # Every later "${" is unclosed too: one report says it all.
                    self._problem(start, "unclosed '${'", "write ${NAME}")
                    break
                out.append(self._reference(text[start : end + 1], start))
                i = end + 1
        out.append(text[i:])
        return "".join(out)

    def _end(self, text: str, start: int) -> int:
        """Where the reference at `start` ends (its "}"), or -1. In a base, a default
        may hold `${python}` (`${BASE:-oci-layout:base/python-${python}}`): it is
        part of the default's literal text, expanded per Python later."""
        end = text.find("}", start)
        if not _is_base(self.path):
            return end
        while end - len(_PYTHON) + 1 > start and text.endswith(_PYTHON[:-1], start, end):
            end = text.find("}", end + 1)
        return end

    def _reference(self, whole: str, offset: int) -> str:
        if whole == _PYTHON:
            # Not an environment variable: each target Python, expanded per image.
            if _is_base(self.path):
                return whole
            self._problem(
                offset,
                f"{_PYTHON} is expanded only in image.base and a variant's base",
                "write the Python version here, or use ${NAME} for an environment variable",
            )
            return whole
        name, colon, default = whole[2:-1].partition(":-")
        if not _NAME.match(name):
            self._problem(
                offset,
                f"{shown(whole)} is not a variable reference",
                "use ${NAME} or ${NAME:-default}; write $$ for a literal $",
            )
            return whole
        value = self.env.get(name)
        # As in the shell: ":-" takes the default when the variable is unset or empty.
        if value is not None and (value or not colon):
            return value
        if colon:
            return default
        self._problem(
            offset,
            f"environment variable {name} is not set",
            f"set {name}, or give a default: ${{{name}:-value}}",
        )
        return whole


def expand(value: Any, env: Mapping[str, str], positions: Positions) -> Any:
    """Return `value` with every `${}` in its strings expanded; report all unset variables."""
    result, problems = expand_all(value, env, positions)
    if problems:
        raise ManifestError(capped([problem for _, problem in problems]))
    return result


def expand_all(
    value: Any, env: Mapping[str, str], positions: Positions
) -> tuple[Any, list[tuple[KeyPath, Problem]]]:
    """`value` expanded as far as it goes, and each bad or unset reference with its path.

    A string with a problem keeps its unexpanded text, so later checks can tell which
    values to leave alone.
    """
    problems: list[tuple[KeyPath, Problem]] = []

    def walk(item: Any, path: KeyPath) -> Any:
        if isinstance(item, str):
            if "$" not in item or len(problems) > MAX_PROBLEMS:
                return item
            return _Expansion(env, path, positions, problems).run(item)
        if isinstance(item, dict):
            return {k: walk(v, (*path, k)) for k, v in item.items()}
        if isinstance(item, list):
            return [walk(v, (*path, i)) for i, v in enumerate(item)]
        return item

    return walk(value, ()), problems
