"""Affected builds: which binaries' inputs changed since a commit, and why.

A binary's inputs are its source folder (less the other binaries' sources and
projects nested in it: `shipyard.engine.inputs`), the in-repo libraries its project
depends on (through the binary's extras and the extras asked of them too), its
manifest entry, and its slice of uv.lock (or its own requirements lock). Changed
files come from git (`shipyard.engine.changes`). Each changed file is mapped to the
deepest source or project folder holding it by dictionary lookups up its parents, so
the cost follows the number of changed files, not the size of the repository.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from packaging.utils import canonicalize_name

from shipyard.engine.changes import changes, file_at
from shipyard.engine.inputs import SourceFolders, relative
from shipyard.engine.reasons import KINDS, Reason, lock_reasons, manifest_reasons
from shipyard.errors import UsageError
from shipyard.files.sources import build_output, never_input
from shipyard.manifest import Manifest, did_you_mean
from shipyard.workspace import Workspace

__all__ = ["Affected", "affected"]

Found = Iterator[tuple[str, Reason]]  # (binary, why)


@dataclass(frozen=True)
class Affected:
    """A binary whose inputs changed, with every reason (kind order, then path)."""

    binary: str
    reasons: tuple[Reason, ...]

    def to_json(self) -> dict[str, object]:
        """A JSON-ready view, as `shipyard affected --json` lists it."""
        return {"binary": self.binary, "reasons": [r.to_json() for r in self.reasons]}


def _library_users(
    workspace: Workspace,
    library: str,
    by_project: Mapping[str, list[str]],
    extras: Mapping[str, frozenset[str]],
) -> dict[str, tuple[str, ...]]:
    """The binaries (of `by_project`) that install `library`, each with a shortest chain of
    project names down to it: through their project alone or with one of their `extras`."""
    found: dict[str, tuple[str, ...]] = {}
    for (key, extra), chain in sorted(workspace.requirers(library).items()):
        for name in by_project.get(key, ()):
            if extra and extra not in extras[name]:
                continue
            if name not in found or len(chain) < len(found[name]):
                found[name] = chain
    return found


def _chosen(manifest: Manifest, binaries: Iterable[str] | None) -> list[str]:
    if binaries is None:
        return list(manifest.binaries)
    wanted = set(binaries)
    for name in sorted(wanted - manifest.binaries.keys()):
        hint = did_you_mean(name, manifest.binaries) or "see `shipyard list`"
        raise UsageError(f"--binary={name}: unknown binary; {hint}")
    return [name for name in manifest.binaries if name in wanted]


def _inside(path: str, folder: str) -> bool:
    return folder == "." or path.startswith(folder + "/")


@dataclass(frozen=True)
class _Chosen:
    """The binaries asked about: each one's project, each project's binaries, each
    binary's extras and its own requirements lock (repository-relative)."""

    names: list[str]
    projects: dict[str, str]
    by_project: dict[str, list[str]]
    extras: dict[str, frozenset[str]]
    requirements: dict[str, str]

    @classmethod
    def of(cls, manifest: Manifest, workspace: Workspace, names: list[str]) -> _Chosen:
        """What `affected` needs to know of the binaries `names`."""
        projects: dict[str, str] = {}
        by_project: dict[str, list[str]] = {}
        requirements: dict[str, str] = {}
        for name in names:
            binary = manifest.binaries[name]
            project = workspace.project_at(binary.source)
            if project is not None:
                projects[name] = project.key
                by_project.setdefault(project.key, []).append(name)
            rel = relative(binary.requirements, manifest.root) if binary.requirements else None
            if rel is not None:
                requirements[name] = rel
        extras: dict[str, frozenset[str]] = {
            name: frozenset(canonicalize_name(e) for e in manifest.binaries[name].extras)
            for name in names
        }
        return cls(names, projects, by_project, extras, requirements)


def _file_reasons(
    folders: SourceFolders,
    workspace: Workspace,
    chosen: _Chosen,
    changed: Iterable[str],
    special: set[str],
) -> Found:
    """Each changed file in the deepest folder holding it: a reason of the binaries
    built from that folder, and of those whose project needs that project."""
    by_folder: dict[str, list[str]] = {}
    for path in changed:
        folder = None if path in special else folders.owner(path)
        if folder is not None and not build_output(path, folder):
            by_folder.setdefault(folder, []).append(path)
    for folder, paths in by_folder.items():
        for name in folders.binaries.get(folder, ()):
            if name in chosen.extras:  # its own requirements lock is a "lock" reason
                own = chosen.requirements.get(name)
                yield from ((name, Reason("source", p)) for p in paths if p != own)
        library = folders.projects.get(folder)
        if library is not None:
            users = _library_users(workspace, library, chosen.by_project, chosen.extras)
            for name, via in users.items():
                yield from ((name, Reason("library", p, via)) for p in paths)


def _context_reasons(manifest: Manifest, names: list[str], changed: Iterable[str]) -> Found:
    """Files changed in the build context of a binary's Dockerfile image."""
    for name in names:
        image = manifest.binaries[name].image
        if not image.dockerfile or "image" not in manifest.binaries[name].outputs:
            continue
        context = relative((manifest.root / image.dockerfile).resolve().parent, manifest.root)
        if context is not None:
            why = "in the Dockerfile's build context"
            yield from (
                (name, Reason("source", p, detail=why))
                for p in changed
                if _inside(p, context) and not build_output(p, context)
            )


def affected(
    manifest: Manifest,
    workspace: Workspace,
    since: str,
    binaries: Iterable[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> tuple[Affected, ...]:
    """The binaries (all, or those named) whose inputs changed since commit `since`.

    In manifest order, each with its reasons. `env` expands `${VAR}` in both
    versions of binaries.yaml when that file changed (default: os.environ).
    """
    root = manifest.root
    chosen = _Chosen.of(manifest, workspace, _chosen(manifest, binaries))
    sha, changed = changes(root, since)
    changed = tuple(p for p in changed if not never_input(p))
    manifest_rel = relative(manifest.path, root) or manifest.path.name
    lock_path = workspace.lock.path if workspace.lock is not None else workspace.root / "uv.lock"
    lock_rel = relative(lock_path, root) or "uv.lock"
    # The manifest and uv.lock count by what changed in them, not as source files.
    special = {manifest_rel, lock_rel}
    changed_set = set(changed)
    found = [
        *_file_reasons(SourceFolders(manifest, workspace), workspace, chosen, changed, special),
        *_context_reasons(manifest, chosen.names, changed),
        *(
            (name, Reason("lock", rel, detail="requirements lock changed"))
            for name, rel in chosen.requirements.items()
            if rel in changed_set
        ),
    ]
    if manifest_rel in changed_set:
        old = file_at(root, sha, manifest_rel)
        env = os.environ if env is None else env
        why = manifest_reasons(manifest, chosen.names, old, manifest_rel, since, env)
        found += why.items()
    if lock_rel in changed_set:
        old = file_at(root, sha, lock_rel)
        why = lock_reasons(
            workspace, chosen.projects, chosen.extras, old, lock_path, lock_rel, since
        )
        found += why.items()
    return _ordered(chosen.names, found)


def _ordered(names: list[str], found: Iterable[tuple[str, Reason]]) -> tuple[Affected, ...]:
    """Each binary of `names` (in that order) with reasons, its reasons in KINDS order."""
    reasons: dict[str, set[Reason]] = {name: set() for name in names}
    for name, reason in found:
        reasons[name].add(reason)

    def order(reason: Reason) -> tuple[int, str, tuple[str, ...], str]:
        return KINDS.index(reason.kind), reason.path, reason.via, reason.detail

    return tuple(
        Affected(name, tuple(sorted(reasons[name], key=order))) for name in names if reasons[name]
    )
