"""Action keys: one hash of an action's declared inputs, serialised canonically.

A builder declares its inputs as named values (`Inputs`); the engine turns them
into an `ActionKey` once per action and hands that to the builder and the
cache. The serialisation is canonical JSON (sorted keys, no whitespace, UTF-8),
never `repr()`, so the key depends on the values only: not on the Python
version's repr, the order of a mapping, the checkout's path or the time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from shipyard._json import Inputs, Value, canonical, plain

__all__ = ["KEY_SCHEMA", "ActionKey", "Inputs", "Value", "canonical"]

# Part of every key: changing how keys are made changes this, so old cache entries miss.
KEY_SCHEMA = "shipyard.action-key/2"


@dataclass(frozen=True)
class ActionKey:
    """The key of one action: its kind, its declared inputs and their hash."""

    kind: str
    inputs: Mapping[str, object]
    digest: str

    @classmethod
    def of(cls, kind: str, inputs: Inputs) -> ActionKey:
        """Hash `inputs` of a `kind` action, with the key schema."""
        found = plain(inputs)
        assert isinstance(found, dict)
        text = canonical({"schema": KEY_SCHEMA, "kind": kind, "inputs": found})
        return cls(kind, found, hashlib.sha256(text).hexdigest())

    def __str__(self) -> str:
        return self.digest
