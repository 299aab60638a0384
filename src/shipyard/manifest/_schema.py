"""The JSON Schema of binaries.yaml, generated from the model that validates it."""

from __future__ import annotations

from typing import Any

from shipyard.manifest._model import ManifestDoc

__all__ = ["SCHEMA_ID", "json_schema"]

SCHEMA_ID = "https://shipyard.invalid/schema/binaries-1.json"


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) for editors and CI validators."""
    schema = ManifestDoc.model_json_schema(by_alias=True, mode="validation")
    _close_pattern_properties(schema)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}


def _close_pattern_properties(node: Any) -> None:
    """Make keys that match no pattern invalid, as the model rejects them.

    pydantic writes constrained dict keys as `patternProperties` but leaves other
    keys allowed; binaries, groups and env names must match their patterns.
    """
    if isinstance(node, dict):
        if "patternProperties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
        for value in node.values():
            _close_pattern_properties(value)
    elif isinstance(node, list):
        for value in node:
            _close_pattern_properties(value)
