"""Full validation of binaries.yaml with pydantic: every problem with its position."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from shipyard.errors import Location, ManifestError, Problem
from shipyard.manifest._expand import expand
from shipyard.manifest._lock import lock_problems
from shipyard.manifest._model import BinaryDoc, ImageDoc, ManifestDoc, ZipappDoc
from shipyard.manifest._report import MAX_PROBLEMS, capped, dotted, shown
from shipyard.manifest._types import (
    ALL_GROUP,
    Binary,
    Image,
    Manifest,
    Project,
    Zipapp,
    did_you_mean,
)
from shipyard.manifest._yaml import KeyPath, Positions, load_yaml

__all__ = ["validate"]

_DEFAULT_OUTPUTS = ("wheel",)
_DEFAULT_PLATFORMS = ("linux/amd64", "linux/arm64")
_DEFAULT_HOSTS = ("linux", "darwin", "windows")


def _model_at(path: KeyPath) -> type[BaseModel] | None:
    """The model that validates the mapping at `path`, for naming its allowed keys."""
    current: Any = ManifestDoc
    for part in path:
        if isinstance(current, type) and issubclass(current, BaseModel):
            info = current.model_fields.get(str(part))
            if info is None:
                info = next((f for f in current.model_fields.values() if f.alias == part), None)
            if info is None:
                return None
            current = info.annotation
        else:
            args = [a for a in typing.get_args(current) if a is not type(None)]
            origin = typing.get_origin(current)
            if origin in (typing.Union, types.UnionType) and len(args) == 1:
                current = args[0]
                args = [a for a in typing.get_args(current) if a is not type(None)]
                origin = typing.get_origin(current)
            if origin is dict:
                current = args[1]
            elif origin is list:
                current = args[0]
            else:
                return None
        while typing.get_origin(current) in (typing.Union, types.UnionType):
            options = [a for a in typing.get_args(current) if a is not type(None)]
            current = options[0]
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _allowed_keys(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


_FRIENDLY = {
    "string_type": "expected a string",
    "int_type": "expected a whole number",
    "list_type": "expected a list",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "bool_type": "expected true or false",
    "int_parsing_size": "the number is too large",
}


def _problem_for(error: Any, positions: Positions) -> Problem:
    loc: KeyPath = tuple(error["loc"])
    kind = error["type"]
    if loc and loc[-1] == "[key]":
        # A mapping key broke its pattern (a binary or group name): point at the key.
        loc = loc[:-1]
        node = positions.node(loc)
        return Problem(
            node.key,
            dotted(loc),
            f"{shown(loc[-1])} is not a valid {_what(loc[:-1])}",
            _pattern_hint(loc[:-1]),
        )
    node = positions.node(loc)
    if kind == "extra_forbidden":
        key = str(loc[-1])
        model = _model_at(loc[:-1])
        allowed = _allowed_keys(model) if model else []
        hint = did_you_mean(key, allowed) or (
            "allowed keys: " + ", ".join(allowed) if allowed else "remove it"
        )
        return Problem(node.key, dotted(loc), f"unknown key {shown(key)}", hint)
    if kind == "missing":
        parent = positions.node(loc[:-1])
        return Problem(parent.key, dotted(loc), f"required key '{loc[-1]}' is missing", "add it")
    value = error.get("input")
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        choices = [c.strip().strip("'") for c in str(expected).replace(" or ", ",").split(",")]
        hint = (did_you_mean(str(value), choices) if isinstance(value, str) else "") or (
            f"expected {expected}"
        )
        return Problem(node.value, dotted(loc), f"{shown(value)} is not allowed", hint)
    if kind == "value_error":
        reason = str(error.get("ctx", {}).get("error", error["msg"]))
        return Problem(node.value, dotted(loc), f"{shown(value)} is not allowed", reason)
    if kind == "string_pattern_mismatch":
        return Problem(
            node.value,
            dotted(loc),
            f"{shown(value)} is not a valid {_what(loc)}",
            _pattern_hint(loc),
        )
    if kind == "too_short":
        if loc == ("binaries",):
            return Problem(node.key, "binaries", "no binaries declared", "declare at least one")
        return Problem(
            node.value,
            dotted(loc),
            "the list is empty",
            "list at least one value, or leave the key out for the default",
        )
    message = _FRIENDLY.get(kind, error["msg"])
    hint = ""
    if kind == "string_type" and isinstance(value, int | float) and not isinstance(value, bool):
        # The text as written; a value reached through an alias has none recorded.
        written = node.text if positions.has(loc) else None
        hint = f'quote it: "{written}"' if written and len(written) <= 40 else "quote it"
    where = node.key if isinstance(value, dict | list) and not positions.has(loc) else node.value
    return Problem(where, dotted(loc), f"{message}, got {type(value).__name__}", hint)


def _problems(errors: list[Any], positions: Positions) -> list[Problem]:
    """Problems for pydantic's errors, leaving out knock-on ones.

    A misspelt required key shows up twice: "unknown key 'sorce'" and "required
    key 'source' is missing". The first, with its did-you-mean, says it all.
    """
    # Only the first few are shown: ten thousand unknown keys must not cost ten
    # thousand did-you-mean searches.
    problems = [_problem_for(e, positions) for e in errors[: MAX_PROBLEMS + 1]]
    typos = {
        (p.path.rsplit(".", 1)[0], p.hint.removeprefix("did you mean '").removesuffix("'?"))
        for p in problems
        if p.message.startswith("unknown key") and p.hint.startswith("did you mean")
    }
    kept = [
        p
        for p in problems
        if not (p.message.startswith("required key") and tuple(p.path.rsplit(".", 1)) in typos)
    ]
    return capped(kept, len(kept) + len(errors) - len(problems))


def _what(loc: KeyPath) -> str:
    if "entrypoint" in loc:
        return "entry point"
    if loc and loc[-1] == "python":
        return "Python version"
    if "env" in loc:
        return "environment variable name"
    if loc[:1] == ("groups",):
        return "group name"
    if loc[:1] == ("binaries",) and len(loc) == 1:
        return "binary name"
    return "name"


def _pattern_hint(loc: KeyPath) -> str:
    if "entrypoint" in loc:
        return "write module.path:function, e.g. meshctl.cli:main"
    if loc and loc[-1] == "python":
        return 'write major.minor in quotes, e.g. "3.11"'
    if "env" in loc:
        return "letters, digits and _, not starting with a digit"
    return "use lower-case letters, digits and . _ - (starting and ending alphanumeric)"


def _merge_image(default: ImageDoc | None, own: ImageDoc | None) -> Image:
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
    )


def _repository_root(manifest_dir: Path) -> Path:
    for folder in (manifest_dir, *manifest_dir.parents):
        if (folder / ".git").exists():
            return folder
    return manifest_dir


def _inside(
    text: str, base: Path, root: Path, where: Location, key: str, problems: list[Problem]
) -> Path | None:
    """`text` resolved against `base`, or None (with a problem) if it leaves `root`."""
    try:
        path = (base / text).resolve()
        inside = path.is_relative_to(root)
    except (OSError, RuntimeError, ValueError) as exc:  # too long, a symlink loop
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        problems.append(Problem(where, key, f"{shown(text)} is not a usable path: {reason}"))
        return None
    if not inside:
        problems.append(
            Problem(
                where,
                key,
                f"{shown(text)} leaves the repository ({root})",
                "point at a path inside the repository",
            )
        )
        return None
    return path


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def _binary(
    name: str,
    doc: BinaryDoc,
    *,
    defaults: ManifestDoc,
    root: Path,
    base: Path,
    positions: Positions,
    problems: list[Problem],
) -> Binary:
    d = defaults.defaults
    where = positions.node(("binaries", name, "source")).value
    key = f"binaries.{name}.source"
    source = _inside(doc.source, base, root, where, key, problems)
    if source is not None and not _is_file(source / "pyproject.toml"):
        problems.append(
            Problem(
                where,
                key,
                f"{shown(doc.source)} has no pyproject.toml",
                "point at the folder that holds the project's pyproject.toml",
            )
        )
    return Binary(
        name=name,
        source=base / doc.source if source is None else source,
        entrypoint=doc.entrypoint,
        outputs=tuple(dict.fromkeys(doc.outputs or d.outputs or _DEFAULT_OUTPUTS)),
        platforms=tuple(dict.fromkeys(doc.platforms or d.platforms or _DEFAULT_PLATFORMS)),
        host=tuple(doc.host or d.host or _DEFAULT_HOSTS),
        image=_merge_image(d.image, doc.image),
        smoke=tuple(doc.smoke if doc.smoke is not None else d.smoke or ()),
        zipapp=_merge_zipapp(d.zipapp, doc.zipapp),
        requirements=_requirements(name, doc, root, base, positions, problems),
    )


def _merge_zipapp(default: ZipappDoc | None, own: ZipappDoc | None) -> Zipapp:
    merged: dict[str, Any] = {}
    for doc in (default, own):
        if doc is not None:
            merged.update(doc.model_dump(exclude_none=True))
    return Zipapp(**merged)


def _requirements(
    name: str,
    doc: BinaryDoc,
    root: Path,
    base: Path,
    positions: Positions,
    problems: list[Problem],
) -> Path | None:
    if doc.requirements is None:
        return None
    where = positions.node(("binaries", name, "requirements")).value
    key = f"binaries.{name}.requirements"
    path = _inside(doc.requirements, base, root, where, key, problems)
    if path is None:
        return base / doc.requirements
    if not _is_file(path):
        problems.append(
            Problem(
                where,
                key,
                f"no lock file at {shown(doc.requirements)}",
                "create it, e.g. uv pip compile --generate-hashes",
            )
        )
    else:
        problems.extend(lock_problems(path, key))
    return path


def _dockerfiles(
    doc: ManifestDoc, root: Path, positions: Positions, problems: list[Problem]
) -> None:
    """Dockerfiles stay in the repository: the engine is sent the folder around one."""
    images: list[tuple[KeyPath, ImageDoc | None]] = [
        (("defaults", "image", "dockerfile"), doc.defaults.image),
        *((("binaries", n, "image", "dockerfile"), b.image) for n, b in doc.binaries.items()),
    ]
    for path, image in images:
        if image is not None and image.dockerfile is not None:
            # Relative to the repository root, as the Dockerfile builder reads it.
            where = positions.node(path).value
            _inside(image.dockerfile, root, root, where, dotted(path), problems)


def _resolve_groups(
    doc: ManifestDoc, positions: Positions, problems: list[Problem]
) -> dict[str, tuple[str, ...]]:
    names = set(doc.binaries)
    for group in doc.groups:
        if group == ALL_GROUP:
            problems.append(
                Problem(
                    positions.node(("groups", group)).key,
                    f"groups.{group}",
                    "'all' is implicit and cannot be declared",
                    "rename the group",
                )
            )
        elif group in names:
            problems.append(
                Problem(
                    positions.node(("groups", group)).key,
                    f"groups.{group}",
                    f"'{group}' is both a group and a binary",
                    "give the group another name",
                )
            )
    resolved: dict[str, tuple[str, ...]] = {}

    def visit(group: str, trail: tuple[str, ...]) -> tuple[str, ...]:
        if group in resolved:
            return resolved[group]
        members: list[str] = []
        for i, member in enumerate(doc.groups[group]):
            if member in names:
                members.append(member)
            elif member in doc.groups and member != group and member not in trail:
                members.extend(visit(member, (*trail, group)))
            else:
                where = positions.node(("groups", group, i)).value
                if member in doc.groups or member == group:
                    loop = (*trail, group)
                    cycle = " -> ".join((*loop[loop.index(member) :], member))
                    problems.append(
                        Problem(
                            where,
                            f"groups.{group}[{i}]",
                            f"group cycle: {cycle}",
                            "remove one of the links",
                        )
                    )
                else:
                    hint = did_you_mean(member, names | set(doc.groups)) or (
                        "known binaries: "
                        + ", ".join(sorted(names)[:10])
                        + (", ..." if len(names) > 10 else "")
                    )
                    problems.append(
                        Problem(
                            where,
                            f"groups.{group}[{i}]",
                            f"unknown binary or group '{member}'",
                            hint,
                        )
                    )
        resolved[group] = tuple(dict.fromkeys(members))
        return resolved[group]

    for group in doc.groups:
        visit(group, ())
    resolved[ALL_GROUP] = tuple(sorted(names))
    return resolved


def validate(path: Path, data: bytes, env: Mapping[str, str]) -> Manifest:
    """Parse, expand and validate manifest bytes; raise ManifestError listing problems."""
    raw, positions = load_yaml(path, data)
    if not isinstance(raw, dict):
        node = positions.node(())
        raise ManifestError(
            [Problem(node.value, "", "the manifest must be a mapping", "start with 'schema: 1'")]
        )
    raw = expand(raw, env, positions)
    try:
        doc = ManifestDoc.model_validate(raw)
    except ValidationError as exc:
        raise ManifestError(_problems(exc.errors(include_url=False), positions)) from None
    problems: list[Problem] = []
    root = _repository_root(path.parent)
    binaries = {
        name: _binary(
            name,
            b,
            defaults=doc,
            root=root,
            base=path.parent,
            positions=positions,
            problems=problems,
        )
        for name, b in doc.binaries.items()
    }
    _dockerfiles(doc, root, positions, problems)
    groups = _resolve_groups(doc, positions, problems)
    if problems:
        raise ManifestError(capped(problems))
    project = Project(doc.project.name, doc.project.version, doc.project.python)
    return Manifest(
        path, root, project, types.MappingProxyType(binaries), types.MappingProxyType(groups)
    )
