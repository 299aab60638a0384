"""Why a binary is affected: the kinds of reason, and what changed in binaries.yaml and uv.lock.

A changed source or library file is its own reason; binaries.yaml and uv.lock count
by what changed in them: a binary's effective manifest entry (read from the older
file as the loader reads it), and its slice of the lock with its extras.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from shipyard.errors import Problem, ShipyardError
from shipyard.manifest import Binary, Manifest
from shipyard.manifest import Project as Settings
from shipyard.workspace import Lock, LockedPackage, Workspace, WorkspaceError

__all__ = ["KINDS", "Reason", "lock_reasons", "manifest_reasons"]

# The kinds of reason, in the order a binary's reasons are listed.
KINDS = ("source", "library", "manifest", "lock")
_SHOWN = 3  # packages named in a lock reason before "and N more"


@dataclass(frozen=True)
class Reason:
    """Why a binary is affected: one changed file, and how it reaches the binary."""

    kind: str  # one of KINDS
    path: str  # the changed file, relative to the repository root, with '/'
    via: tuple[str, ...] = ()  # "library": project names from the binary's to the changed one
    detail: str = ""  # human text: what in the manifest entry or the lock changed

    def __str__(self) -> str:
        notes = [f"through {' -> '.join(self.via)}"] if self.via else []
        notes += [self.detail] if self.detail else []
        return f"{self.path} changed" + (f" ({'; '.join(notes)})" if notes else "")

    def to_json(self) -> dict[str, object]:
        """A JSON-ready view, with the one-line text as `text`."""
        return {
            "kind": self.kind,
            "path": self.path,
            "via": list(self.via),
            "detail": self.detail,
            "text": str(self),
        }


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Path):
        return str(value)
    return value


def _entry(binary: Binary, settings: Settings) -> dict[str, object]:
    """A binary's effective manifest entry as flat `key: value`s, for naming what changed."""
    out: dict[str, object] = {}
    for field in dataclasses.fields(binary):
        value = getattr(binary, field.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for inner in dataclasses.fields(value):
                out[f"{field.name}.{inner.name}"] = _plain(getattr(value, inner.name))
        elif field.name != "name":
            out[field.name] = _plain(value)
    for field in dataclasses.fields(settings):
        out[f"project.{field.name}"] = _plain(getattr(settings, field.name))
    return out


def _entries_then(
    manifest: Manifest, data: bytes, env: Mapping[str, str]
) -> dict[str, dict[str, object]] | None:
    """Each binary's effective entry in an older binaries.yaml, or None if it cannot be read.

    Validated as the loader does it (defaults merged, ${VAR} expanded with `env`,
    paths resolved) but without the checks against today's files: an old entry
    may name a folder deleted since, and must still compare.
    """
    from pydantic import ValidationError

    from shipyard.manifest._binaries import merge_binary
    from shipyard.manifest._expand import expand
    from shipyard.manifest._model import ManifestDoc
    from shipyard.manifest._yaml import load_yaml

    try:
        raw, positions = load_yaml(manifest.path, data)
        if not isinstance(raw, dict):
            return None
        doc = ManifestDoc.model_validate(expand(raw, env, positions))
        given = doc.project.python
        pythons = (given,) if isinstance(given, str) else tuple(given)
        settings = Settings(doc.project.name, doc.project.version, pythons[0], pythons)
        problems: list[Problem] = []  # today's file checks: not this comparison's business
        return {
            name: _entry(
                merge_binary(
                    name,
                    entry,
                    defaults=doc,
                    root=manifest.root,
                    base=manifest.path.parent,
                    positions=positions,
                    problems=problems,
                ),
                settings,
            )
            for name, entry in doc.binaries.items()
        }
    except (ShipyardError, ValidationError, OSError, ValueError, KeyError):
        return None


def manifest_reasons(
    manifest: Manifest,
    chosen: list[str],
    old: bytes | None,
    rel: str,
    since: str,
    env: Mapping[str, str],
) -> dict[str, Reason]:
    """The binaries of `chosen` whose effective entry differs in the binaries.yaml `old`
    (its bytes at `since`; None: it had none), each with what changed."""
    then = None if old is None else _entries_then(manifest, old, env)
    if old is not None and then is None:
        detail = f"{rel} at {since} could not be read; counted as changed"
        return {name: Reason("manifest", rel, detail=detail) for name in chosen}
    out: dict[str, Reason] = {}
    for name in chosen:
        before = (then or {}).get(name)
        if before is None:
            out[name] = Reason("manifest", rel, detail="new binary")
            continue
        now = _entry(manifest.binaries[name], manifest.project)
        keys = sorted(k for k in now.keys() | before.keys() if now.get(k) != before.get(k))
        if keys:
            out[name] = Reason("manifest", rel, detail="entry changed: " + ", ".join(keys))
    return out


def _slice(lock: Lock, key: str, extras: frozenset[str]) -> tuple[LockedPackage, ...] | None:
    return lock.slice(key, sorted(extras)) if key in lock.members else None


def _lock_detail(
    old: tuple[LockedPackage, ...] | None, new: tuple[LockedPackage, ...] | None
) -> str:
    before = {p.name: p for p in old or ()}
    after = {p.name: p for p in new or ()}
    items: list[str] = []
    for name in sorted(before.keys() | after.keys()):
        was, now = before.get(name), after.get(name)
        if was is None and now is not None:
            items.append(f"{name} {now.version} added")
        elif now is None and was is not None:
            items.append(f"{name} {was.version} removed")
        elif was is not None and now is not None and was != now:
            if was.version != now.version:
                items.append(f"{name} {was.version} -> {now.version}")
            else:
                what = "source" if was.source != now.source else "hashes"
                items.append(f"{name} {now.version} ({what} changed)")
    if not items:
        return "locked set changed"
    more = len(items) - _SHOWN
    return "locked: " + ", ".join(items[:_SHOWN]) + (f" and {more} more" if more > 0 else "")


def lock_reasons(
    workspace: Workspace,
    projects: Mapping[str, str],
    extras: Mapping[str, frozenset[str]],
    old: bytes | None,
    lock_path: Path,
    rel: str,
    since: str,
) -> dict[str, Reason]:
    """Binaries (by name, with a project key in `projects`) whose locked slice (with
    their `extras`) changed."""
    new = workspace.lock
    if old is None and new is None:
        return {}
    if old is None or new is None:
        detail = f"{rel} added" if old is None else f"{rel} removed"
        return {name: Reason("lock", rel, detail=detail) for name in projects}
    try:
        then = Lock.parse(old.decode(), lock_path)
    except (WorkspaceError, UnicodeDecodeError):
        detail = f"{rel} at {since} could not be read; counted as changed"
        return {name: Reason("lock", rel, detail=detail) for name in projects}
    out: dict[str, Reason] = {}
    for name, key in projects.items():
        now = _slice(new, key, extras[name])
        try:
            was = _slice(then, key, extras[name])
        except WorkspaceError:  # an old lock out of step with itself: count it as changed
            out[name] = Reason("lock", rel, detail=f"{rel} at {since} could not be read")
            continue
        if was is None and now is None:
            continue
        chosen = sorted(extras[name])
        if (
            was is None
            or now is None
            or then.slice_digest(key, chosen) != new.slice_digest(key, chosen)
        ):
            out[name] = Reason("lock", rel, detail=_lock_detail(was, now))
    return out
