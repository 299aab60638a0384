"""pydantic's validation errors as manifest problems, placed and worded for people.

Each error becomes one `Problem` at the key or value it is about, in words a manifest's
author knows (the key paths of the file, the names the manifest gives things), with a
hint: a did-you-mean, the allowed keys or values, or how to write the value. Errors
that only repeat another (a misspelt required key is also "missing") are left out.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any

from pydantic import BaseModel

from shipyard.errors import Problem
from shipyard.manifest._model import ManifestDoc
from shipyard.manifest._report import MAX_PROBLEMS, dotted, shown
from shipyard.manifest._types import PLATFORMS, did_you_mean
from shipyard.manifest._yaml import KeyPath, Node, Positions

__all__ = ["schema_problems", "unbranched"]


def _model_at(path: KeyPath) -> type[BaseModel] | None:
    """The model that validates the mapping at `path`, for naming its allowed keys."""
    current: Any = ManifestDoc
    for part in path:
        if isinstance(current, type) and issubclass(current, BaseModel):
            info = current.model_fields.get(str(part))
            if info is None:
                info = next((f for f in current.model_fields.values() if f.alias == part), None)
            if info is None:
                return None
            current = info.annotation
        else:
            args = [a for a in typing.get_args(current) if a is not type(None)]
            origin = typing.get_origin(current)
            if origin in (typing.Union, types.UnionType) and len(args) == 1:
                current = args[0]
                args = [a for a in typing.get_args(current) if a is not type(None)]
                origin = typing.get_origin(current)
            if origin is dict:
                current = args[1]
            elif origin is list:
                current = args[0]
            else:
                return None
        while typing.get_origin(current) in (typing.Union, types.UnionType):
            options = [a for a in typing.get_args(current) if a is not type(None)]
            current = options[0]
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _allowed_keys(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


_FRIENDLY = {
    "string_type": "expected a string",
    "int_type": "expected a whole number",
    "list_type": "expected a list",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "bool_type": "expected true or false",
    "int_parsing_size": "the number is too large",
}


def _problem_for(error: Any, positions: Positions) -> Problem:
    """The problem pydantic's `error` reports: about a key, a value out of its choices,
    a value of the wrong shape, or one of the wrong type."""
    loc: KeyPath = tuple(error["loc"])
    kind = error["type"]
    if loc and loc[-1] == "[key]":
        # A mapping key broke its pattern (a binary or group name): point at the key.
        loc = loc[:-1]
        return Problem(
            positions.node(loc).key,
            dotted(loc),
            f"{shown(loc[-1])} is not a valid {_what(loc[:-1])}",
            _pattern_hint(loc[:-1]),
        )
    node = positions.node(loc)
    if kind == "extra_forbidden":
        key = str(loc[-1])
        model = _model_at(loc[:-1])
        allowed = _allowed_keys(model) if model else []
        hint = did_you_mean(key, allowed) or (
            "allowed keys: " + ", ".join(allowed) if allowed else "remove it"
        )
        return Problem(node.key, dotted(loc), f"unknown key {shown(key)}", hint)
    if kind == "missing":
        parent = positions.node(loc[:-1])
        return Problem(parent.key, dotted(loc), f"required key '{loc[-1]}' is missing", "add it")
    if kind in ("literal_error", "value_error"):
        return _not_allowed(error, loc, node)
    if kind in ("string_pattern_mismatch", "too_short"):
        return _misshapen(error, loc, node, positions)
    return _wrong_type(error, loc, node, positions)


def _not_allowed(error: Any, loc: KeyPath, node: Node) -> Problem:
    """A value that is none of its choices (a literal), or that a validator refused."""
    value = error.get("input")
    if error["type"] == "value_error":
        reason = str(error.get("ctx", {}).get("error", error["msg"]))
        return Problem(node.value, dotted(loc), f"{shown(value)} is not allowed", reason)
    if value in PLATFORMS and "image" in loc:
        return Problem(
            node.value,
            dotted(loc),
            f"{shown(value)} is not allowed",
            "images are Linux only (macOS and Windows are zipapp platforms): list "
            "Linux platforms here, e.g. linux/amd64, linux/arm64",
        )
    expected = error.get("ctx", {}).get("expected", "")
    choices = [c.strip().strip("'") for c in str(expected).replace(" or ", ",").split(",")]
    hint = (did_you_mean(str(value), choices) if isinstance(value, str) else "") or (
        f"expected {expected}"
    )
    return Problem(node.value, dotted(loc), f"{shown(value)} is not allowed", hint)


def _misshapen(error: Any, loc: KeyPath, node: Node, positions: Positions) -> Problem:
    """A string that does not match its pattern, or an empty list."""
    value = error.get("input")
    if error["type"] == "string_pattern_mismatch" and _is_python(loc):
        if len(loc) == 3 and not positions.has(loc):
            loc = loc[:2]  # written as one string, held as a list of one
        return Problem(
            node.value,
            dotted(loc),
            f"{shown(value)} is not a valid Python version",
            _python_hint(value),
        )
    if error["type"] == "string_pattern_mismatch":
        return Problem(
            node.value,
            dotted(loc),
            f"{shown(value)} is not a valid {_what(loc)}",
            _pattern_hint(loc),
        )
    if loc == ("binaries",):
        return Problem(node.key, "binaries", "no binaries declared", "declare at least one")
    return Problem(
        node.value,
        dotted(loc),
        "the list is empty",
        "list at least one value, or leave the key out for the default",
    )


def _wrong_type(error: Any, loc: KeyPath, node: Node, positions: Positions) -> Problem:
    """A value of the wrong type, saying the type it has."""
    kind = error["type"]
    value = error.get("input")
    message = _FRIENDLY.get(kind, error["msg"])
    hint = ""
    if kind == "string_type" and isinstance(value, int | float) and not isinstance(value, bool):
        # The text as written; a value reached through an alias has none recorded.
        written = node.text if positions.has(loc) else None
        hint = f'quote it: "{written}"' if written and len(written) <= 40 else "quote it"
    where = node.key if isinstance(value, dict | list) and not positions.has(loc) else node.value
    return Problem(where, dotted(loc), f"{message}, got {type(value).__name__}", hint)


# pydantic names the branch of a union an error came from in its location: the stage
# entries of `tests:` are a mapping or `false`.
_BRANCHES = ("StageDoc", "literal[False]")


def unbranched(errors: list[Any]) -> list[Any]:
    """Errors from inside a union (a test stage's mapping or `false`) as errors of the
    key itself: the branch names left out of the location, and the `false` branch
    said only as the hint of a value that is no mapping."""
    out: list[Any] = []
    for error in errors:
        loc = tuple(error["loc"])
        if not any(p in _BRANCHES or str(p).startswith("dict[") for p in loc):
            out.append(error)
            continue
        if loc[-1] == "literal[False]":
            continue  # the mapping branch's error says it, with this hint
        plain = tuple(p for p in loc if p not in _BRANCHES and not str(p).startswith("dict["))
        fixed = {**error, "loc": plain}
        if error["type"] in ("model_type", "dict_type"):
            fixed["type"] = "value_error"
            fixed["ctx"] = {"error": "write a mapping of its keys, or false to turn it off"}
        out.append(fixed)
    return out


def schema_problems(errors: list[Any], positions: Positions) -> tuple[list[Problem], int]:
    """Problems for pydantic's errors, leaving out knock-on ones; and how many errors
    were left unread.

    A misspelt required key shows up twice: "unknown key 'sorce'" and "required
    key 'source' is missing". The first, with its did-you-mean, says it all.
    """
    # Only the first few are shown: ten thousand unknown keys must not cost ten
    # thousand did-you-mean searches.
    problems = [_problem_for(e, positions) for e in errors[: MAX_PROBLEMS + 1]]
    typos = {
        (p.path.rsplit(".", 1)[0], p.hint.removeprefix("did you mean '").removesuffix("'?"))
        for p in problems
        if p.message.startswith("unknown key") and p.hint.startswith("did you mean")
    }
    kept = [
        p
        for p in problems
        if not (p.message.startswith("required key") and tuple(p.path.rsplit(".", 1)) in typos)
    ]
    return kept, len(errors) - len(problems)


def _is_python(loc: KeyPath) -> bool:
    """Whether `loc` is project.python or one of its list items."""
    return loc[:2] == ("project", "python")


_PATCH = re.compile(r"(?:python|py|cp)?-?(3)\.([0-9]{1,2})(?:\.[0-9]+)?")


def _python_hint(value: object) -> str:
    """How to write a target Python: major.minor in quotes, one or a list."""
    found = _PATCH.fullmatch(value.strip()) if isinstance(value, str) else None
    example = f"{found[1]}.{found[2]}" if found else "3.12"
    return (
        f'write major.minor in quotes, e.g. "{example}", or a list such as ["3.11", "{example}"]'
        if example != "3.11"
        else 'write major.minor in quotes, e.g. "3.11", or a list such as ["3.11", "3.12"]'
    )


def _what(loc: KeyPath) -> str:
    if "entrypoint" in loc:
        return "entry point"
    if _is_python(loc):
        return "Python version"
    if "env" in loc:
        return "environment variable name"
    if loc[:1] == ("groups",):
        return "group name"
    if loc[:1] == ("binaries",) and len(loc) == 1:
        return "binary name"
    if _is_stage(loc):
        return "stage name"
    return "name"


def _is_stage(loc: KeyPath) -> bool:
    """Whether `loc` holds stages by name: tests.stages or tests.projects.<name>."""
    return loc == ("tests", "stages") or (len(loc) == 3 and loc[:2] == ("tests", "projects"))


def _pattern_hint(loc: KeyPath) -> str:
    if "entrypoint" in loc:
        return "write module.path:function, e.g. meshctl.cli:main"
    if _is_python(loc):
        return 'write major.minor in quotes, e.g. "3.11"'
    if "env" in loc:
        return "letters, digits and _, not starting with a digit"
    if "allow_missing_libraries" in loc:
        return "give a library's file name, e.g. libstdc++.so.6, or '*' for any"
    if _is_stage(loc):
        return "a stage name is lower-case letters, digits and -, starting with a letter"
    if loc[:1] == ("tests",) and "groups" in loc:
        return "a dependency group's name: letters, digits and . _ -"
    return "use lower-case letters, digits and . _ - (starting and ending alphanumeric)"
