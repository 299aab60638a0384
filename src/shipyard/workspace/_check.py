"""Is uv.lock up to date with the pyproject.toml files? Answered without running uv.

uv records, for each workspace member, the requirements it locked from (`metadata.requires-dist`
for dependencies and extras, `metadata.requires-dev` for dependency groups) and the member
set (`[manifest] members`). Each requirement written in a pyproject.toml must match one
recorded requirement, compared the way uv compares them: canonical names and extras,
specifiers as versions (`>=1.0` is `>=1`), markers by what they select, and the kind of
source `[tool.uv.sources]` gives it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.markers import InvalidMarker, Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from shipyard.workspace import _markers
from shipyard.workspace._text import Key, TomlFile, Where, WorkspaceError

if TYPE_CHECKING:
    from shipyard.workspace.projects import Project, Workspace

__all__ = ["check_in_process"]

_RELOCK = "run `uv lock`"
_LOCAL = ("editable", "virtual", "directory", "path", "workspace")


@dataclass(frozen=True)
class _Req:
    """A requirement reduced to what decides whether the lock still holds."""

    name: str
    extras: frozenset[str]
    specifier: SpecifierSet
    marker: Marker | None
    source: str  # "", "local", "git", "url", "index"

    def matches(self, other: _Req) -> bool:
        return (
            self.name == other.name
            and self.extras == other.extras
            and self.source == other.source
            and (self.source == "local" or self.specifier == other.specifier)
            and _markers.equivalent(self.marker, other.marker)
        )


def _kind(kind: str) -> str:
    return "local" if kind in _LOCAL else kind if kind in ("git", "url", "index") else ""


def _written(text: str, extra: str, kinds: dict[str, str]) -> _Req:
    requirement = Requirement(text)
    name = canonicalize_name(requirement.name)
    marker = requirement.marker
    if extra:
        clause = f'extra == "{extra}"'
        marker = Marker(f"({marker}) and {clause}" if marker else clause)
    source = _kind(kinds.get(name, ""))
    if not source and requirement.url:
        url = requirement.url
        source = "git" if url.startswith("git+") else "local" if url.startswith("file:") else "url"
    return _Req(
        name,
        frozenset(canonicalize_name(e) for e in requirement.extras),
        requirement.specifier,
        marker,
        source,
    )


def _recorded(entry: dict[str, Any]) -> _Req:
    source = next((k for k in (*_LOCAL, "git", "url", "index") if k in entry), "")
    marker = entry.get("marker")
    return _Req(
        canonicalize_name(str(entry.get("name", ""))),
        frozenset(canonicalize_name(e) for e in entry.get("extras", [])),
        SpecifierSet(entry.get("specifier", "")),
        Marker(marker) if marker else None,
        _kind(source),
    )


def _groups(data: dict[str, Any]) -> dict[str, list[tuple[str, Key]]]:
    """`[dependency-groups]` with includes expanded, plus the legacy dev-dependencies."""
    table = data.get("dependency-groups", {})
    table = table if isinstance(table, dict) else {}

    def expand(group: str, trail: tuple[str, ...]) -> Iterator[tuple[str, Key]]:
        for index, item in enumerate(table.get(group, [])):
            if isinstance(item, str):
                yield item, ("dependency-groups", group, index)
            elif isinstance(item, dict) and isinstance(item.get("include-group"), str):
                included = item["include-group"]
                if included not in trail:
                    yield from expand(included, (*trail, included))

    groups: dict[str, list[tuple[str, Key]]] = {
        canonicalize_name(g): list(expand(g, (g,))) for g in table
    }
    legacy = data.get("tool", {}).get("uv", {}).get("dev-dependencies", [])
    if isinstance(legacy, list) and legacy:
        groups.setdefault("dev", []).extend(
            (text, ("tool", "uv", "dev-dependencies", i)) for i, text in enumerate(legacy)
        )
    return groups


def _compare(
    file: TomlFile,
    written: list[tuple[str, str, Key]],
    recorded: list[dict[str, Any]],
    kinds: dict[str, str],
    fallback: Key,
    what: str,
    root: Path,
) -> None:
    """Raise at the first written requirement uv.lock does not record, or at `fallback`
    when uv.lock records one that is no longer written."""
    left = [_recorded(entry) for entry in recorded]
    for text, extra, key in written:
        try:
            wanted = _written(text, extra, kinds)
        except (InvalidRequirement, InvalidMarker):
            raise WorkspaceError(
                file.where(key, root=root), f"invalid requirement {text!r}", "write it as PEP 508"
            ) from None
        match = next((i for i, have in enumerate(left) if wanted.matches(have)), None)
        if match is None:
            raise WorkspaceError(
                file.where(key, fallback, root=root),
                f"uv.lock is out of date: it does not record `{text}` for {what}",
                _RELOCK,
            )
        del left[match]
    if left:
        raise WorkspaceError(
            file.where(fallback, ("project",), root=root, key=True),
            f"uv.lock is out of date: it records `{left[0].name}` for {what}, which "
            "pyproject.toml no longer asks for",
            _RELOCK,
        )


def _member(workspace: Workspace, key: str) -> WorkspaceError | str | None:
    """In-process: the first way uv.lock is out of date with member `key`'s
    pyproject.toml, None when it holds, or a note when this check cannot tell."""
    lock = workspace.lock
    assert lock is not None
    root = workspace.root
    project = workspace.projects.get(key) or workspace.duplicates[key][0]
    file = workspace._files[project.root]
    kinds = workspace._source_kinds.get(project.root, {})
    package = lock.member(key)
    if package is None:
        return WorkspaceError(
            file.where(("project",), root=root),
            f"uv.lock is out of date: it does not hold the project `{project.name}`",
            _RELOCK,
        )
    stale = _stale_version(project, file, package, root)
    if stale is not None:
        return stale
    metadata = package.get("metadata", {})
    if {"dependencies", "optional-dependencies"} & set(project.dynamic):
        if project.core is None:
            return f"`{project.name}` has dynamic requirements"
        dynamic_at: Key = ("project", "dynamic")
        written = [(text, "", dynamic_at) for text in project.core.requires_dist]
        kinds = {**kinds, project.key: "local"}
    else:
        written = _static_requirements(file.data["project"])
    try:
        _compare_member(file, written, metadata, kinds, project.name, root)
    except WorkspaceError as error:
        return error
    except (InvalidSpecifier, InvalidMarker, TypeError, AttributeError) as error:
        return WorkspaceError(
            Where(lock.path, 1, 1, root), f"uv.lock is malformed: {error}", _RELOCK
        )
    return None


def _stale_version(
    project: Project, file: TomlFile, package: dict[str, Any], root: Path
) -> WorkspaceError | None:
    """The problem when uv.lock records another version than the static one written."""
    version = file.data["project"].get("version")
    locked = package.get("version")
    if (
        "version" not in project.dynamic
        and isinstance(version, str)
        and isinstance(locked, str)
        and _same_version(version, locked) is False
    ):
        return WorkspaceError(
            file.where(("project", "version"), ("project",), root=root),
            f"uv.lock is out of date: it records `{project.name}` {locked}, "
            f"pyproject.toml says {version}",
            _RELOCK,
        )
    return None


def _static_requirements(table: dict[str, Any]) -> list[tuple[str, str, Key]]:
    """The requirements `[project]` writes: (text, extra or "", where)."""
    written: list[tuple[str, str, Key]] = [
        (text, "", ("project", "dependencies", i))
        for i, text in enumerate(table.get("dependencies", []))
    ]
    for extra, texts in (table.get("optional-dependencies") or {}).items():
        written += [
            (text, canonicalize_name(extra), ("project", "optional-dependencies", extra, i))
            for i, text in enumerate(texts)
        ]
    return written


def _compare_member(
    file: TomlFile,
    written: list[tuple[str, str, Key]],
    metadata: Any,
    kinds: dict[str, str],
    name: str,
    root: Path,
) -> None:
    """Raise the first requirement or dependency group of project `name` that its
    uv.lock `metadata` does not record as written."""
    _compare(
        file, written, metadata.get("requires-dist", []), kinds,
        ("project", "dependencies"), f"`{name}`", root,
    )  # fmt: skip
    recorded_groups = metadata.get("requires-dev", {})
    groups = _groups(file.data)
    for group in sorted(set(groups) | {canonicalize_name(g) for g in recorded_groups}):
        recorded: list[dict[str, Any]] = next(
            (v for g, v in recorded_groups.items() if canonicalize_name(g) == group), []
        )
        _compare(
            file, [(t, "", k) for t, k in groups.get(group, [])], recorded, kinds,
            ("dependency-groups", group), f"the group `{group}` of `{name}`",
            root,
        )  # fmt: skip


def _same_version(a: str, b: str) -> bool | None:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return None


def _manifest(workspace: Workspace) -> WorkspaceError | None:
    """In-process: the member set, and the root's constraints and overrides, against the
    lock's `[manifest]`."""
    lock = workspace.lock
    assert lock is not None
    root = workspace.root
    root_file = workspace._files.get(root)
    gone = sorted(lock.workspace_members - set(workspace.members))
    if gone:
        where = (
            root_file.where(("tool", "uv", "workspace", "members"), root=root, key=True)
            if root_file
            else Where(lock.path, 1, 1, root)
        )
        return WorkspaceError(
            where, f"uv.lock is out of date: it holds the member `{gone[0]}`, which the "
            "workspace no longer has", _RELOCK,
        )  # fmt: skip
    if root_file is None:
        return None
    uv = root_file.data.get("tool", {}).get("uv", {})
    for setting in ("constraint-dependencies", "override-dependencies"):
        listed = uv.get(setting, []) if isinstance(uv, dict) else []
        table = setting.split("-")[0] + "s"  # constraints, overrides
        try:
            left = [_recorded(e) for e in lock.manifest.get(table, []) if isinstance(e, dict)]
            written = [_written(t, "", {}) for t in listed if isinstance(t, str)]
        except (InvalidRequirement, InvalidMarker, InvalidSpecifier):
            continue  # uv says what is wrong with them
        same = len(left) == len(written)
        for wanted in written:
            match = next((i for i, have in enumerate(left) if wanted.matches(have)), None)
            if match is None:
                same = False
                break
            del left[match]
        if not same:
            return WorkspaceError(
                root_file.where(("tool", "uv", setting), ("tool", "uv"), root=root, key=True),
                f"uv.lock is out of date: its {table} are not the `{setting}` written here",
                _RELOCK,
            )
    return None


def check_in_process(workspace: Workspace, keys: Iterable[str] | None = None) -> list[str]:
    """The lock's freshness as read here without uv: raise at the first way uv.lock is
    out of date for a member in `keys` (None: every member), or with the member set or
    the root's constraints and overrides. Returns notes on what could not be told."""
    if workspace.lock is None:
        return []
    wanted = set(workspace.members if keys is None else keys) & set(workspace.members)
    notes: list[str] = []
    for key in sorted(wanted):
        found = _member(workspace, key)
        if isinstance(found, WorkspaceError):
            raise found
        if found:
            notes.append(found)
    error = _manifest(workspace)
    if error is not None:
        raise error
    return notes
