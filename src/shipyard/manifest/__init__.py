"""The manifest, binaries.yaml: its model, loader and JSON Schema."""

from typing import Any

from shipyard.errors import Location
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
    Service,
    SizeBudget,
    Stage,
    Tests,
    Variant,
    Zipapp,
    did_you_mean,
    find_manifest,
    parse_duration,
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
    "Service",
    "SizeBudget",
    "Stage",
    "Tests",
    "Variant",
    "Zipapp",
    "did_you_mean",
    "find_manifest",
    "json_schema",
    "load_manifest",
    "locate",
    "parse_duration",
    "parse_size",
]


def locate(
    manifest: Manifest, *keys: tuple[str | int, ...], at_key: bool = False
) -> list[Location]:
    """Where each key path (("project", "python"), say) is written in the manifest's file:
    the value, else its nearest written parent; 1:1 when the file cannot be read again.
    For checks that run after loading and point at the key they judge; `at_key`:
    where the key itself is written (a name that is wrong)."""
    from shipyard.errors import ShipyardError
    from shipyard.manifest._yaml import load_yaml

    try:
        _, positions = load_yaml(manifest.path, manifest.path.read_bytes(), keep_going=True)
    except (OSError, ValueError, ShipyardError):
        return [Location(manifest.path, 1, 1) for _ in keys]
    return [positions.node(key).key if at_key else positions.node(key).value for key in keys]


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of binaries.yaml, for editors and CI validators."""
    from shipyard.manifest._schema import json_schema as generate

    return generate()
