"""`${VAR}` and `${VAR:-default}` expansion over the manifest's string values."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from shipyard.errors import Location, ManifestError, Problem
from shipyard.manifest._yaml import KeyPath, Positions

__all__ = ["expand"]

# ${NAME} or ${NAME:-default}; "$$" writes a literal "$". The default is literal
# text: no nested expansion, so no expansion loops are possible. Any other
# closed ${...} is reported as such; a lone "${" as unclosed.
_REF = re.compile(
    r"\$\$|\$\{(?P<name>[^}:]*)(?::-(?P<default>[^}]*))?\}|\$\{(?P<other>[^}]*)\}|\$\{"
)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _dotted(path: KeyPath) -> str:
    return ".".join(str(p) for p in path)


def _expand_one(
    text: str, env: Mapping[str, str], path: KeyPath, positions: Positions, problems: list[Problem]
) -> str:
    def where(offset: int) -> Location:
        node = positions.node(path)
        if node.plain:
            return Location(node.value.file, node.value.line, node.value.column + offset)
        return node.value

    def replace(match: re.Match[str]) -> str:
        whole = match.group(0)
        if whole == "$$":
            return "$"
        name = match.group("name")
        if match.group("other") is not None:
            name = "-"  # closed but not NAME or NAME:-default: reported below
        if name is None:
            problems.append(
                Problem(where(match.start()), _dotted(path), "unclosed '${'", "write ${NAME}")
            )
            return whole
        if not _NAME.match(name):
            problems.append(
                Problem(
                    where(match.start()),
                    _dotted(path),
                    f"'{whole}' is not a variable reference",
                    "use ${NAME} or ${NAME:-default}; write $$ for a literal $",
                )
            )
            return whole
        value = env.get(name)
        default = match.group("default")
        # As in the shell: ":-" takes the default when the variable is unset or empty.
        if value is not None and (value or default is None):
            return value
        if default is not None:
            return default
        problems.append(
            Problem(
                where(match.start()),
                _dotted(path),
                f"environment variable {name} is not set",
                f"set {name}, or give a default: ${{{name}:-value}}",
            )
        )
        return whole

    return _REF.sub(replace, text)


def expand(value: Any, env: Mapping[str, str], positions: Positions) -> Any:
    """Return `value` with every `${}` in its strings expanded; report all unset variables."""
    problems: list[Problem] = []

    def walk(item: Any, path: KeyPath) -> Any:
        if isinstance(item, str):
            return _expand_one(item, env, path, positions, problems) if "$" in item else item
        if isinstance(item, dict):
            return {k: walk(v, (*path, k)) for k, v in item.items()}
        if isinstance(item, list):
            return [walk(v, (*path, i)) for i, v in enumerate(item)]
        return item

    result = walk(value, ())
    if problems:
        raise ManifestError(problems)
    return result
