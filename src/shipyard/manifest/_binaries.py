"""A binary as the manifest means it: its entry with the defaults merged in.

The keys a binary leaves out come from `defaults:` (mappings such as image.env merge key
by key, the binary's own winning), then from shipyard's defaults; `${python}` in an
image's bases is expanded for each target Python, adding a variant per other Python.
Its source folder and lock file are checked on the way, and what must hold across its
keys once merged (`_binary_checks`).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shipyard.errors import Problem
from shipyard.manifest._binary_checks import check_binary, check_compile, variant_clash
from shipyard.manifest._grammar import PYTHON_PLACEHOLDER
from shipyard.manifest._model import (
    BinaryDoc,
    ImageDoc,
    ManifestDoc,
    SizeDoc,
    ZipappDoc,
)
from shipyard.manifest._references import Folders, Resolved, requirements, source
from shipyard.manifest._report import dotted
from shipyard.manifest._types import Binary, Image, SizeBudget, Variant, Zipapp, parse_size
from shipyard.manifest._yaml import Positions

__all__ = ["merge_binary"]

_DEFAULT_OUTPUTS = ("wheel",)
_DEFAULT_PLATFORMS = ("linux/amd64", "linux/arm64")
_DEFAULT_HOSTS = ("linux", "darwin", "windows")


def merge_binary(
    name: str,
    doc: BinaryDoc,
    *,
    defaults: ManifestDoc,
    root: Path,
    base: Path,
    positions: Positions,
    problems: list[Problem],
    resolved: Resolved | None = None,
) -> Binary:
    """The binary `name` with the defaults merged in. Its source folder and lock file
    are checked (problems appended), unless `resolved` holds them, checked already."""
    d = defaults.defaults
    if resolved is None:
        folder, lock = _source_and_lock(name, doc, root, base, positions, problems)
    else:
        folder, lock = resolved
    platforms = tuple(dict.fromkeys(doc.platforms or d.platforms or _DEFAULT_PLATFORMS))
    pythons = tuple(dict.fromkeys(defaults.project.python))
    clash = variant_clash(name, positions, problems)
    binary = Binary(
        name=name,
        source=base / doc.source if folder is None else folder,
        entrypoint=doc.entrypoint,
        outputs=tuple(dict.fromkeys(doc.outputs or d.outputs or _DEFAULT_OUTPUTS)),
        platforms=platforms,
        host=tuple(doc.host or d.host or _DEFAULT_HOSTS),
        image=_per_python(_merge_image(d.image, doc.image, platforms), pythons, clash),
        smoke=tuple(doc.smoke if doc.smoke is not None else d.smoke or ()),
        zipapp=_merge_zipapp(d.zipapp, doc.zipapp),
        requirements=lock,
        extras=tuple(dict.fromkeys(doc.extras or ())),
        size=types.MappingProxyType(_merge_size(d.size, doc.size)),
    )
    check_binary(binary, positions, problems)
    check_compile(binary, pythons, positions, problems)
    return binary


def _source_and_lock(
    name: str, doc: BinaryDoc, root: Path, base: Path, positions: Positions, problems: list[Problem]
) -> Resolved:
    """The binary's source folder and lock file, checked (problems appended)."""
    folder = source(
        doc.source,
        where=positions.node(("binaries", name, "source")).value,
        key=dotted(("binaries", name, "source")),
        root=root,
        base=base,
        folders=Folders(base),
        problems=problems,
    )
    lock = requirements(name, doc.requirements, root, base, positions, problems)
    return folder, lock


def _merge_image(
    default: ImageDoc | None, own: ImageDoc | None, platforms: tuple[str, ...]
) -> Image:
    merged: dict[str, Any] = {}
    for doc in (default, own):
        if doc is None:
            continue
        for key, value in doc.model_dump(exclude_none=True).items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
    return Image(
        base=merged.get("base"),
        hubs=tuple(merged.get("hubs", ())),
        tags=tuple(merged.get("tags", ())),
        user=merged.get("user"),
        workdir=merged.get("workdir"),
        env=types.MappingProxyType(dict(merged.get("env", {}))),
        labels=types.MappingProxyType(dict(merged.get("labels", {}))),
        dockerfile=merged.get("dockerfile"),
        platforms=tuple(dict.fromkeys(merged.get("platforms") or platforms)),
        variants=types.MappingProxyType(
            {
                name: Variant(v.get("base"), types.MappingProxyType(dict(v.get("env") or {})))
                for name, v in merged.get("variants", {}).items()
            }
        ),
        protected=tuple(merged.get("protected", ())),
        movable_tags=tuple(merged.get("movable_tags", Image.movable_tags)),
        allow_missing_libraries=tuple(merged.get("allow_missing_libraries", ())),
    )


def _per_python(
    image: Image, pythons: Sequence[str], on_clash: typing.Callable[[str], None]
) -> Image:
    """`image` with `${python}` in its bases expanded: the image and its declared
    variants for the first Python, and, when `image.base` uses `${python}`, one more
    variant per other Python (`python3.12`, and `debug-python3.12` for each declared
    variant whose base uses it too), resolved for that Python. A Dockerfile image is
    left for its Dockerfile to decide. `on_clash` is told of a declared variant whose
    name an added one takes."""

    def at(text: str | None, version: str) -> str | None:
        return text.replace(PYTHON_PLACEHOLDER, version) if text else text

    first = pythons[0]
    variants = {
        n: dataclasses.replace(v, base=at(v.base, first)) for n, v in image.variants.items()
    }
    added: dict[str, Variant] = {}
    if image.base and PYTHON_PLACEHOLDER in image.base and not image.dockerfile:
        for version in pythons[1:]:
            added[f"python{version}"] = Variant(
                at(image.base, version), types.MappingProxyType({}), version
            )
            for name, declared in image.variants.items():
                base = declared.base or image.base
                if PYTHON_PLACEHOLDER in base:
                    added[f"{name}-python{version}"] = Variant(
                        at(base, version), declared.env, version
                    )
    for name in sorted(set(added) & set(variants)):
        on_clash(name)
    return dataclasses.replace(
        image,
        base=at(image.base, first),
        variants=types.MappingProxyType({**variants, **added}),
    )


def _merge_size(default: SizeDoc | None, own: SizeDoc | None) -> dict[str, SizeBudget]:
    merged: dict[str, dict[str, str]] = {}
    for doc in (default, own):
        if doc is not None:
            for kind, budget in doc.model_dump(exclude_none=True).items():
                merged[kind] = {**merged.get(kind, {}), **budget}
    return {
        kind: SizeBudget(
            **{k: parse_size(v) for k, v in budget.items()}  # checked by the model already
        )
        for kind, budget in merged.items()
    }


def _merge_zipapp(default: ZipappDoc | None, own: ZipappDoc | None) -> Zipapp:
    merged: dict[str, Any] = {}
    for doc in (default, own):
        if doc is not None:
            merged.update(doc.model_dump(exclude_none=True))
    return Zipapp(**merged)
