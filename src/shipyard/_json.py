"""Reading JSON that others wrote (a registry's answers, the documents of a layout, an
archive or a remote cache entry): one parser call, and what it may not throw.

json descends one Python frame per level of nesting, so `[[[[...` a few thousand levels
deep raises RecursionError, which no caller expects from a parser and which would end
shipyard with a traceback. Here it becomes the `ValueError` (a `json.JSONDecodeError`,
as for any other bytes that are not JSON) every caller already turns into its own typed
error. What the document holds is still the caller's to check: a parse gives `Any`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["Inputs", "Value", "canonical", "loads", "plain"]

# JSON data as shipyard writes it for hashing (action keys, build identities).
Value = str | int | bool | None | Sequence["Value"] | Mapping[str, "Value"]
Inputs = Mapping[str, Value]


def plain(value: object) -> object:
    """`value` as JSON types; anything else is a bug in the caller's declared inputs."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    raise TypeError(f"an action key input must be JSON data, not {type(value).__name__}")


def canonical(value: object) -> bytes:
    """The canonical JSON bytes of `value` (sorted keys, no whitespace, UTF-8): equal
    values, equal bytes, whatever the order of a mapping or the Python version."""
    return json.dumps(
        plain(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode()


def loads(data: bytes | str) -> Any:
    """`json.loads(data)`; nesting too deep for the parser raises `json.JSONDecodeError`
    instead of RecursionError (bytes that are not UTF-8 raise UnicodeDecodeError, a
    ValueError too)."""
    try:
        return json.loads(data)
    except RecursionError:
        pass  # out of the except block first: the error is raised on a shallow stack
    raise json.JSONDecodeError("values nested too deeply to read", "", 0)
