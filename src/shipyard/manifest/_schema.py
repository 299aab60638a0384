"""The JSON Schema of binaries.yaml, generated from the model that validates it."""

from __future__ import annotations

from typing import Any

from shipyard.manifest._model import ManifestDoc

__all__ = ["SCHEMA_ID", "json_schema"]

SCHEMA_ID = "https://shipyard.invalid/schema/binaries-1.json"


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) for editors and CI validators."""
    schema = ManifestDoc.model_json_schema(by_alias=True, mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}
