"""The validated manifest as JSON and back, for the manifest cache (see `_load`).

The round trip is exact: `manifest_from_json(manifest_to_json(m)) == m`, so a build
whose manifest is unchanged reads this instead of validating again.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shipyard.manifest._types import (
    Binary,
    Image,
    Manifest,
    Project,
    Service,
    SizeBudget,
    Stage,
    StageEntry,
    Tests,
    Variant,
    Zipapp,
)

__all__ = ["manifest_from_json", "manifest_to_json", "tests_from_json", "tests_to_json"]


def _stage_to_json(stage: StageEntry) -> dict[str, Any] | None:
    if stage is None:
        return None
    return {
        "command": stage.command,
        "groups": None if stage.groups is None else list(stage.groups),
        "env": None if stage.env is None else dict(stage.env),
        "timeout": stage.timeout,
        "services": None
        if stage.services is None
        else [{**vars(s), "env": dict(s.env)} for s in stage.services],
        "requirements": None if stage.requirements is None else list(stage.requirements),
    }


def _stage_from_json(data: Mapping[str, Any] | None) -> StageEntry:
    if data is None:
        return None
    services = data["services"]
    return Stage(
        data["command"],
        None if data["groups"] is None else tuple(data["groups"]),
        None if data["env"] is None else types.MappingProxyType(dict(data["env"])),
        data["timeout"],
        None
        if services is None
        else tuple(
            Service(**{**s, "env": types.MappingProxyType(dict(s["env"]))}) for s in services
        ),
        None if data.get("requirements") is None else tuple(data["requirements"]),
    )


def tests_to_json(tests: Tests) -> dict[str, Any]:
    """A JSON-ready form of the `tests:` section."""
    return {
        "stages": {k: _stage_to_json(v) for k, v in tests.stages.items()},
        "projects": {
            p: None if stages is None else {k: _stage_to_json(v) for k, v in stages.items()}
            for p, stages in tests.projects.items()
        },
    }


def tests_from_json(data: Mapping[str, Any]) -> Tests:
    """The inverse of tests_to_json."""
    return Tests(
        types.MappingProxyType({k: _stage_from_json(v) for k, v in data["stages"].items()}),
        types.MappingProxyType(
            {
                p: None
                if stages is None
                else types.MappingProxyType({k: _stage_from_json(v) for k, v in stages.items()})
                for p, stages in data["projects"].items()
            }
        ),
    )


def manifest_to_json(manifest: Manifest) -> dict[str, Any]:
    """A JSON-ready form of a validated manifest (for the manifest cache)."""
    return {
        "path": str(manifest.path),
        "root": str(manifest.root),
        "project": {**vars(manifest.project), "pythons": list(manifest.project.pythons)},
        "groups": {k: list(v) for k, v in manifest.groups.items()},
        "tests": tests_to_json(manifest.tests),
        "binaries": {
            name: {
                "source": str(b.source),
                "entrypoint": b.entrypoint,
                "outputs": list(b.outputs),
                "platforms": list(b.platforms),
                "host": list(b.host),
                "smoke": list(b.smoke),
                "zipapp": vars(b.zipapp),
                "requirements": str(b.requirements) if b.requirements else None,
                "extras": list(b.extras),
                "size": {kind: vars(budget) for kind, budget in b.size.items()},
                "image": {
                    **{k: getattr(b.image, k) for k in ("base", "user", "workdir", "dockerfile")},
                    "hubs": list(b.image.hubs),
                    "tags": list(b.image.tags),
                    "env": dict(b.image.env),
                    "labels": dict(b.image.labels),
                    "platforms": list(b.image.platforms),
                    "variants": {
                        n: {"base": v.base, "env": dict(v.env), "python": v.python}
                        for n, v in b.image.variants.items()
                    },
                    "protected": list(b.image.protected),
                    "movable_tags": list(b.image.movable_tags),
                    "allow_missing_libraries": list(b.image.allow_missing_libraries),
                },
            }
            for name, b in manifest.binaries.items()
        },
    }


def manifest_from_json(data: Mapping[str, Any]) -> Manifest:
    """The inverse of manifest_to_json."""
    binaries = {}
    for name, b in data["binaries"].items():
        image = b["image"]
        binaries[name] = Binary(
            name=name,
            source=Path(b["source"]),
            entrypoint=b["entrypoint"],
            outputs=tuple(b["outputs"]),
            platforms=tuple(b["platforms"]),
            host=tuple(b["host"]),
            smoke=tuple(b["smoke"]),
            zipapp=Zipapp(**b["zipapp"]),
            requirements=Path(b["requirements"]) if b["requirements"] else None,
            extras=tuple(b["extras"]),
            size=types.MappingProxyType({k: SizeBudget(**v) for k, v in b["size"].items()}),
            image=Image(
                base=image["base"],
                hubs=tuple(image["hubs"]),
                tags=tuple(image["tags"]),
                user=image["user"],
                workdir=image["workdir"],
                dockerfile=image["dockerfile"],
                env=types.MappingProxyType(dict(image["env"])),
                labels=types.MappingProxyType(dict(image["labels"])),
                platforms=tuple(image["platforms"]),
                variants=types.MappingProxyType(
                    {
                        n: Variant(
                            v["base"], types.MappingProxyType(dict(v["env"])), v.get("python")
                        )
                        for n, v in image["variants"].items()
                    }
                ),
                protected=tuple(image["protected"]),
                movable_tags=tuple(image["movable_tags"]),
                allow_missing_libraries=tuple(image.get("allow_missing_libraries", ())),
            ),
        )
    return Manifest(
        path=Path(data["path"]),
        root=Path(data["root"]),
        project=Project(**data["project"]),
        binaries=types.MappingProxyType(binaries),
        groups=types.MappingProxyType({k: tuple(v) for k, v in data["groups"].items()}),
        tests=tests_from_json(data["tests"]) if "tests" in data else Tests(),
    )
