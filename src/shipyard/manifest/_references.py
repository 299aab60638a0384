"""What a manifest refers to: source folders, lock files, Dockerfiles and group members.

These checks look at the file system and across keys, so they run on the expanded
values even when the schema found problems elsewhere: every value of the right type
that has no problem of its own is checked, and one run reports every mistake.
"""

from __future__ import annotations

import os
import stat
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from shipyard.errors import Location, Problem
from shipyard.manifest._lock import lock_problems
from shipyard.manifest._report import dotted, named, shown
from shipyard.manifest._types import ALL_GROUP, did_you_mean
from shipyard.manifest._yaml import KeyPath, Positions

__all__ = ["Folders", "Resolved", "check_references", "requirements", "resolve_groups", "source"]

# A binary's source folder and lock file, resolved (None: not given, or not usable).
Resolved = tuple[Path | None, Path | None]


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


# Folders never worth suggesting as a source, and bounds on the walk that finds the
# ones that are: a did-you-mean must not cost more than the validation it decorates.
_NOT_SOURCES = frozenset({"node_modules", "__pycache__", "dist", "build", "site-packages"})
_MAX_DEPTH = 4
_MAX_FOLDERS = 2000


class Folders:
    """The folders under the manifest's folder, found once and only when a source is
    missing, to suggest the one that was meant."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self._found: tuple[list[str], list[str]] | None = None

    def _walk(self) -> tuple[list[str], list[str]]:
        projects: list[str] = []
        folders: list[str] = []
        queue = deque([(self.base, "")])
        while queue and len(folders) < _MAX_FOLDERS:
            folder, rel = queue.popleft()
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                name = entry.name
                if name.startswith(".") or name in _NOT_SOURCES or name.endswith(".egg-info"):
                    continue
                try:
                    if not entry.is_dir(follow_symlinks=False):
                        continue
                except OSError:
                    continue
                path = f"{rel}{name}"
                folders.append(path)
                if _is_file(Path(entry.path) / "pyproject.toml"):
                    projects.append(path)
                if path.count("/") + 1 < _MAX_DEPTH:
                    queue.append((Path(entry.path), f"{path}/"))
        return projects, folders

    def hint(self, text: str) -> str:
        """A did-you-mean for a source folder that does not exist, else where sources are."""
        if self._found is None:
            self._found = self._walk()
        projects, folders = self._found
        wanted = text.strip().removeprefix("./").rstrip("/")
        suggestion = did_you_mean(wanted, projects) or did_you_mean(wanted, folders)
        if suggestion:
            return suggestion
        if projects:
            listed = ", ".join(named(p) for p in sorted(projects)[:5])
            listed += ", ..." if len(projects) > 5 else ""
            return f"folders with a pyproject.toml: {listed}"
        return "point at the folder that holds the project's pyproject.toml"


def source(
    text: str,
    *,
    where: Location,
    key: str,
    root: Path,
    base: Path,
    folders: Folders,
    problems: list[Problem],
) -> Path | None:
    """The source folder `text` names, resolved; a problem if it is not a project folder."""
    found = _inside(text, base, root, where, key, problems)
    if found is None:
        return None
    try:
        is_dir = stat.S_ISDIR(found.stat().st_mode)
    except (FileNotFoundError, NotADirectoryError):
        problems.append(Problem(where, key, f"no folder {shown(text)}", folders.hint(text)))
        return found
    except OSError as exc:  # a name too long, no permission
        reason = exc.strerror or type(exc).__name__
        problems.append(Problem(where, key, f"{shown(text)} is not a usable path: {reason}"))
        return found
    if not is_dir:
        problems.append(Problem(where, key, f"{shown(text)} is not a folder", folders.hint(text)))
    elif not _is_file(found / "pyproject.toml"):
        problems.append(
            Problem(
                where,
                key,
                f"{shown(text)} has no pyproject.toml",
                "point at the folder that holds the project's pyproject.toml",
            )
        )
    return found


def requirements(
    name: str,
    text: str | None,
    root: Path,
    base: Path,
    positions: Positions,
    problems: list[Problem],
) -> Path | None:
    """The lock file `text` names, resolved; problems if it is missing or not hash-pinned."""
    if text is None:
        return None
    where = positions.node(("binaries", name, "requirements")).value
    key = dotted(("binaries", name, "requirements"))
    path = _inside(text, base, root, where, key, problems)
    if path is None:
        return base / text
    if not _is_file(path):
        problems.append(
            Problem(
                where,
                key,
                f"no lock file at {shown(text)}",
                "create it, e.g. uv pip compile --generate-hashes",
            )
        )
    else:
        problems.extend(lock_problems(path, key))
    return path


def _dockerfiles(
    items: Sequence[tuple[KeyPath, object]],
    root: Path,
    positions: Positions,
    problems: list[Problem],
) -> None:
    """Dockerfiles stay in the repository: the engine is sent the folder around one."""
    for path, text in items:
        if isinstance(text, str):
            # Relative to the repository root, as the Dockerfile builder reads it.
            where = positions.node(path).value
            _inside(text, root, root, where, dotted(path), problems)


def resolve_groups(
    groups: Mapping[str, object],
    names: set[str],
    positions: Positions,
    problems: list[Problem],
    bad: Callable[[KeyPath], bool] = lambda path: False,
) -> dict[str, tuple[str, ...]]:
    """Each group's binaries, groups of groups expanded, `all` added; a problem for each
    unknown member and cycle. Members that are not strings, or `bad`, are left out."""
    _check_group_names(groups, names, positions, problems)
    resolved: dict[str, tuple[str, ...]] = {}

    def visit(group: str, trail: tuple[str, ...]) -> tuple[str, ...]:
        if group in resolved:
            return resolved[group]
        members: list[str] = []
        listed = groups[group]
        for i, member in enumerate(listed if isinstance(listed, list) else ()):
            if not isinstance(member, str) or bad(("groups", group, i)):
                continue
            if member in names:
                members.append(member)
            elif member in groups and member != group and member not in trail:
                members.extend(visit(member, (*trail, group)))
            else:
                at = ("groups", group, i)
                problems.append(_bad_member(member, at, (*trail, group), groups, names, positions))
        resolved[group] = tuple(dict.fromkeys(members))
        return resolved[group]

    for group in groups:
        visit(group, ())
    resolved[ALL_GROUP] = tuple(sorted(names))
    return resolved


def _check_group_names(
    groups: Mapping[str, object], names: set[str], positions: Positions, problems: list[Problem]
) -> None:
    """A problem for a group named `all` (it is implicit) or like a binary."""
    for group in groups:
        if group == ALL_GROUP:
            problems.append(
                Problem(
                    positions.node(("groups", group)).key,
                    dotted(("groups", group)),
                    "'all' is implicit and cannot be declared",
                    "rename the group",
                )
            )
        elif group in names:
            problems.append(
                Problem(
                    positions.node(("groups", group)).key,
                    dotted(("groups", group)),
                    f"{shown(group)} is both a group and a binary",
                    "give the group another name",
                )
            )


def _bad_member(
    member: str,
    at: KeyPath,
    loop: tuple[str, ...],
    groups: Mapping[str, object],
    names: set[str],
    positions: Positions,
) -> Problem:
    """The problem of group member `member`, written at `at`: a cycle back through
    `loop` (the groups on the way, the member's own group last), or a name that is
    neither a binary nor a group."""
    where = positions.node(at).value
    if member in groups or member == loop[-1]:
        cycle = " -> ".join(named(m) for m in (*loop[loop.index(member) :], member))
        return Problem(where, dotted(at), f"group cycle: {cycle}", "remove one of the links")
    hint = did_you_mean(member, names | set(groups)) or (
        "known binaries: "
        + ", ".join(named(n) for n in sorted(names)[:10])
        + (", ..." if len(names) > 10 else "")
    )
    return Problem(where, dotted(at), f"unknown binary or group {shown(member)}", hint)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def check_references(
    raw: Mapping[str, Any],
    *,
    root: Path,
    base: Path,
    positions: Positions,
    problems: list[Problem],
    bad: Callable[[KeyPath], bool],
) -> tuple[dict[str, Resolved], dict[str, tuple[str, ...]]]:
    """Check what the expanded manifest `raw` refers to; return each binary's resolved
    source and lock file, and the resolved groups.

    `raw` may have failed the schema: a value of the wrong type is skipped (the schema
    reports it), and so is any value `bad` says already has a problem of its own.
    """
    folders = Folders(base)
    binaries = raw.get("binaries")
    resolved: dict[str, Resolved] = {}
    dockerfiles: list[tuple[KeyPath, object]] = [
        (
            ("defaults", "image", "dockerfile"),
            _mapping(_mapping(raw.get("defaults")).get("image")).get("dockerfile"),
        )
    ]
    for name, value in _mapping(binaries).items():
        entry = _mapping(value)
        path: Path | None = None
        lock: Path | None = None
        text = entry.get("source")
        if isinstance(text, str) and not bad(("binaries", name, "source")):
            path = source(
                text,
                where=positions.node(("binaries", name, "source")).value,
                key=dotted(("binaries", name, "source")),
                root=root,
                base=base,
                folders=folders,
                problems=problems,
            )
        text = entry.get("requirements")
        if isinstance(text, str) and not bad(("binaries", name, "requirements")):
            lock = requirements(name, text, root, base, positions, problems)
        resolved[name] = (path, lock)
        dockerfiles.append(
            (
                ("binaries", name, "image", "dockerfile"),
                _mapping(entry.get("image")).get("dockerfile"),
            )
        )
    _dockerfiles([(p, t) for p, t in dockerfiles if not bad(p)], root, positions, problems)
    groups: dict[str, tuple[str, ...]] = {}
    if isinstance(binaries, dict):  # without binaries, every member would be unknown
        groups = resolve_groups(
            _mapping(raw.get("groups")), set(binaries), positions, problems, bad
        )
    return resolved, groups
