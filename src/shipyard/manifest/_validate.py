"""Full validation of binaries.yaml: every problem with its position, in file order.

The manifest is read in stages, each adding its problems: the YAML (`_yaml`), the
`${VAR}` expansion (`_expand`), the schema (pydantic; `_schema_errors` words its
errors), what the manifest refers to (`_references`), and what holds across keys once
the defaults are merged into each binary (`_binaries`, `_binary_checks`,
`_workspace_root`). A value with a problem is not checked again by a later stage.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from shipyard.errors import Location, ManifestError, Problem
from shipyard.manifest._binaries import merge_binary
from shipyard.manifest._binary_checks import check_pythons
from shipyard.manifest._expand import expand_all
from shipyard.manifest._model import ManifestDoc, StageDoc, TestsDoc
from shipyard.manifest._references import check_references
from shipyard.manifest._report import capped, dotted
from shipyard.manifest._schema_errors import schema_problems, unbranched
from shipyard.manifest._types import (
    Manifest,
    Project,
    Service,
    Stage,
    StageEntry,
    Tests,
    parse_duration,
)
from shipyard.manifest._workspace_root import outside_its_workspace, workspace_root
from shipyard.manifest._yaml import KeyPath, Positions, load_yaml

__all__ = ["validate"]


def _in_order(
    manifest: Path, problems: list[Problem], anchors: Mapping[str, Location], unread: int
) -> list[Problem]:
    """The problems in the order of the file, capped; a lock file's problems follow the
    manifest key that names the lock file (`anchors`, by key path)."""

    def place(problem: Problem) -> tuple[int, int, int, int]:
        at = problem.location
        if at.file == manifest:
            return (at.line, at.column, 0, 0)
        anchor = anchors.get(problem.path, Location(manifest, 1 << 30, 0))
        return (anchor.line, anchor.column, at.line, at.column)

    ordered = sorted(problems, key=place)
    return capped(ordered, len(ordered) + unread)


def validate(path: Path, data: bytes, env: Mapping[str, str]) -> Manifest:
    """Parse, expand and validate manifest bytes; raise ManifestError listing problems.

    Every problem is reported at once, in the order of the file: the YAML's (but a
    syntax error stops the reading), the expansion's, the schema's, and those of what
    the manifest refers to (folders, lock files, group members). A value with a
    problem of its own is not checked again by a later stage, which would only
    repeat it in other words.
    """
    raw, positions = load_yaml(path, data, keep_going=True)
    found = list(positions.problems)
    if not isinstance(raw, dict):
        raise _not_a_mapping(path, positions, found)
    raw, unexpanded = expand_all(raw, env, positions)
    found += unexpanded
    spoilt = {key for key, _ in found if key is not None}
    doc, errors = _schema(raw, spoilt)
    problems = [problem for _, problem in found]
    worded, unread = schema_problems(errors, positions)
    problems += worded
    spoilt.update(tuple(e["loc"]) for e in errors)
    root = workspace_root(path.parent)
    resolved, groups = check_references(
        raw,
        root=root,
        base=path.parent,
        positions=positions,
        problems=problems,
        bad=lambda key: _under(key, spoilt),
    )
    if problems or doc is None:
        raise ManifestError(_in_order(path, problems, _lock_anchors(raw, positions), unread))
    check_pythons(doc.project.python, positions, problems)
    binaries = {
        name: merge_binary(
            name,
            b,
            defaults=doc,
            root=root,
            base=path.parent,
            positions=positions,
            problems=problems,
            resolved=resolved[name],
        )
        for name, b in doc.binaries.items()
    }
    for name, binary in binaries.items():
        outside_its_workspace(name, binary.source, root, positions, problems)
    if problems:  # those that hold across keys, found once the defaults are merged in
        raise ManifestError(_in_order(path, problems, {}, 0))
    return Manifest(
        path,
        root,
        _project(doc),
        types.MappingProxyType(binaries),
        types.MappingProxyType(groups),
        _tests(doc.tests),
    )


def _not_a_mapping(
    path: Path, positions: Positions, found: list[tuple[KeyPath | None, Problem]]
) -> ManifestError:
    """The error of a manifest whose document is no mapping: the YAML's problems, and
    that one unless an unreadable scalar already says it all."""
    node = positions.node(())
    problems = [problem for _, problem in found]
    if not any(key == () for key, _ in found):
        problems.append(
            Problem(node.value, "", "the manifest must be a mapping", "start with 'schema: 1'")
        )
    return ManifestError(_in_order(path, problems, {}, 0))


def _schema(raw: dict[str, Any], spoilt: set[KeyPath]) -> tuple[ManifestDoc | None, list[Any]]:
    """The manifest's document, or None and the schema's errors, those inside a value
    with a problem already left out."""
    try:
        return ManifestDoc.model_validate(raw), []
    except ValidationError as exc:
        errors = [
            e
            for e in unbranched(exc.errors(include_url=False))
            if not _under(tuple(e["loc"]), spoilt)
        ]
        return None, errors


def _lock_anchors(raw: dict[str, Any], positions: Positions) -> dict[str, Location]:
    """Where each binary names its lock file, by key path: its problems follow it."""
    names = raw.get("binaries")
    if not isinstance(names, dict):
        return {}
    return {
        dotted(key): positions.node(key).value
        for key in (("binaries", n, "requirements") for n in names)
    }


def _project(doc: ManifestDoc) -> Project:
    """The `project:` section as settings, the first target Python the default one."""
    pythons = tuple(doc.project.python)
    return Project(
        doc.project.name,
        doc.project.version,
        pythons[0],
        pythons,
        doc.project.versioning,
        doc.project.tag_prefix,
    )


def _stage(doc: StageDoc | Literal[False]) -> StageEntry:
    if doc is False:
        return None
    services = None
    if doc.services is not None:
        services = tuple(
            Service(
                s.name,
                s.start,
                s.ready,
                parse_duration(s.timeout) if s.timeout is not None else 30.0,
                types.MappingProxyType(dict(s.env or {})),
            )
            for s in doc.services
        )
    return Stage(
        doc.command,
        tuple(doc.groups) if doc.groups is not None else None,
        types.MappingProxyType(dict(doc.env)) if doc.env is not None else None,
        parse_duration(doc.timeout) if doc.timeout is not None else None,
        services,
        tuple(doc.requirements) if doc.requirements is not None else None,
    )


def _tests(doc: TestsDoc | None) -> Tests:
    """The `tests:` section as settings (no section: no settings, the defaults rule)."""
    if doc is None:
        return Tests()
    projects: dict[str, Mapping[str, StageEntry] | None] = {}
    for name, stages in (doc.projects or {}).items():
        projects[name] = (
            None
            if stages is False
            else types.MappingProxyType({k: _stage(v) for k, v in stages.items()})
        )
    return Tests(
        types.MappingProxyType({k: _stage(v) for k, v in (doc.stages or {}).items()}),
        types.MappingProxyType(projects),
    )


def _under(key: KeyPath, spoilt: set[KeyPath]) -> bool:
    """Whether `key` is, or is inside, a value that has a problem already."""
    return any(key[:n] in spoilt for n in range(len(key) + 1))
