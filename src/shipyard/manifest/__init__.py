"""The manifest, binaries.yaml: its model, loader and JSON Schema."""

from shipyard.manifest._load import (
    MANIFEST_NAME,
    Binary,
    Image,
    Manifest,
    Project,
    did_you_mean,
    find_manifest,
    load_manifest,
)
from shipyard.manifest._model import HOST_OS, OUTPUT_KINDS, PLATFORMS
from shipyard.manifest._schema import json_schema

__all__ = [
    "HOST_OS",
    "MANIFEST_NAME",
    "OUTPUT_KINDS",
    "PLATFORMS",
    "Binary",
    "Image",
    "Manifest",
    "Project",
    "did_you_mean",
    "find_manifest",
    "json_schema",
    "load_manifest",
]
