"""Action keys: one hash of an action's declared inputs, serialised canonically.

A builder declares its inputs as named values (`Inputs`); the engine turns them
into an `ActionKey` once per action and hands that to the builder and the
cache. The serialisation is canonical JSON (sorted keys, no whitespace, UTF-8),
never `repr()`, so the key depends on the values only: not on the Python
version's repr, the order of a mapping, the checkout's path or the time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["KEY_SCHEMA", "ActionKey", "Inputs", "Value", "canonical"]

# Part of every key: changing how keys are made changes this, so old cache entries miss.
KEY_SCHEMA = "shipyard.action-key/2"

Value = str | int | bool | None | Sequence["Value"] | Mapping[str, "Value"]
Inputs = Mapping[str, Value]


def _plain(value: object) -> object:
    """`value` as JSON types; anything else is a bug in a builder's declared inputs."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    raise TypeError(f"an action key input must be JSON data, not {type(value).__name__}")


def canonical(value: object) -> bytes:
    """The canonical JSON bytes of `value` (sorted keys, no whitespace, UTF-8)."""
    return json.dumps(
        _plain(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode()


@dataclass(frozen=True)
class ActionKey:
    """The key of one action: its kind, its declared inputs and their hash."""

    kind: str
    inputs: Mapping[str, object]
    digest: str

    @classmethod
    def of(cls, kind: str, inputs: Inputs) -> ActionKey:
        """Hash `inputs` of a `kind` action, with the key schema."""
        plain = _plain(inputs)
        assert isinstance(plain, dict)
        text = canonical({"schema": KEY_SCHEMA, "kind": kind, "inputs": plain})
        return cls(kind, plain, hashlib.sha256(text).hexdigest())

    def __str__(self) -> str:
        return self.digest
