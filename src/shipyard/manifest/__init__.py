"""The manifest, binaries.yaml: its model, loader and JSON Schema."""

from typing import Any

from shipyard.manifest._load import load_manifest
from shipyard.manifest._types import (
    HOST_OS,
    IMAGE_PLATFORMS,
    MANIFEST_NAME,
    OUTPUT_KINDS,
    PLATFORMS,
    Binary,
    Image,
    Manifest,
    Project,
    SizeBudget,
    Variant,
    Zipapp,
    did_you_mean,
    find_manifest,
    parse_size,
)

__all__ = [
    "HOST_OS",
    "IMAGE_PLATFORMS",
    "MANIFEST_NAME",
    "OUTPUT_KINDS",
    "PLATFORMS",
    "Binary",
    "Image",
    "Manifest",
    "Project",
    "SizeBudget",
    "Variant",
    "Zipapp",
    "did_you_mean",
    "find_manifest",
    "json_schema",
    "load_manifest",
    "parse_size",
]


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of binaries.yaml, for editors and CI validators."""
    from shipyard.manifest._schema import json_schema as generate

    return generate()
