"""Which files make up each binary's and action's inputs: one answer for the plan, the
action keys, `--since` and the per-action stamps.

Every binary's source and every project's folder owns the files below it, less those
of the folders nested inside it (other binaries and projects: separate inputs). The
manifest and uv.lock are no folder's files: they reach a binary through its entry
and its locked slice. So a wheel's key hashes its source less what is nested
(`Action.nested`, from `SourceFolders.nested`), `--since` maps a changed file to the
deepest folder holding it (`SourceFolders.owner`), and a binary's version follows
the commits to its source and its libraries' folders (`version_inputs`).
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard.manifest import Manifest

if TYPE_CHECKING:
    from shipyard.engine.plan import Action, Plan
    from shipyard.workspace import Workspace

__all__ = ["Inputs", "SourceFolders", "relative", "version_inputs"]


def relative(path: Path, root: Path) -> str | None:
    """`path` relative to `root` with '/', '.' for the root itself; None when outside."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        try:
            return path.resolve().relative_to(root).as_posix()
        except ValueError:
            return None


def _parts(folder: str) -> tuple[str, ...]:
    return () if folder == "." else tuple(folder.split("/"))


class SourceFolders:
    """Every binary's source and every project's folder, repository-relative ('.' for
    the root): the folders whose files are inputs, each of what is built from it."""

    def __init__(self, manifest: Manifest, workspace: Workspace | None = None) -> None:
        self.root = manifest.root
        # Owned here: the manifest and uv.lock are every binary's inputs through its
        # entry and its slice (keys, `affected`), not through the folder holding them.
        self.shared = (manifest.path, manifest.root / "uv.lock")
        self.binaries: dict[str, list[str]] = {}  # folder -> the binaries built from it
        for binary in manifest.binaries.values():
            rel = relative(binary.source, self.root)
            if rel is not None:
                self.binaries.setdefault(rel, []).append(binary.name)
        self.projects: dict[str, str] = {}  # folder -> the project's key
        for key, project in workspace.projects.items() if workspace is not None else ():
            rel = relative(project.root, self.root)
            if rel is not None:
                self.projects[rel] = key
        # Sorted by path parts, a folder's descendants follow it contiguously.
        self._sorted = sorted({_parts(f) for f in (*self.binaries, *self.projects)})

    def nested(self, source: Path) -> tuple[Path, ...]:
        """What of `source` is not its files: the other folders strictly inside it
        (sorted), then the manifest and uv.lock when they lie directly in it."""
        rel = relative(source, self.root)
        inside = self._inside(_parts(rel)) if rel is not None else ()
        return (*inside, *(f for f in self.shared if f.parent == source))

    def _inside(self, prefix: tuple[str, ...]) -> tuple[Path, ...]:
        start = bisect.bisect_right(self._sorted, prefix)
        inside: list[Path] = []
        for parts in itertools.islice(self._sorted, start, None):
            if parts[: len(prefix)] != prefix:
                break
            inside.append(self.root.joinpath(*parts))
        return tuple(inside)

    def owner(self, path: str) -> str | None:
        """The deepest folder holding the repository-relative file `path`, or None."""
        parts = _parts(path)
        for depth in range(len(parts) - 1, -1, -1):
            folder = "/".join(parts[:depth]) or "."
            if folder in self.binaries or folder in self.projects:
                return folder
        return None


@dataclass(frozen=True)
class Inputs:
    """The folders (repository-relative, POSIX) whose last commit versions a group of
    actions, and the folders inside them that belong to others."""

    include: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    tag_prefix: str = ""  # the tags that version them (`project.tag_prefix`, filled in)

    def pathspec(self) -> list[str]:
        """git pathspecs: the folders, minus the excluded ones."""
        return [*(p or "." for p in self.include), *(f":(exclude){p}" for p in self.exclude)]

    def pathspec_key(self) -> str:
        """These inputs as one string (a memo's key)."""
        return json.dumps([self.include, self.exclude])

    def holds(self, path: str) -> bool:
        """Whether the repository-relative `path` is one of these inputs."""

        def inside(folder: str) -> bool:
            return not folder or path == folder or path.startswith(folder + "/")

        return any(inside(f) for f in self.include) and not any(inside(f) for f in self.exclude)


def _folders(plan: Plan, action: Action) -> Sequence[Path]:
    """The folders whose commits version `action`: its source, and those of the
    in-repository libraries its project needs (with the binary's extras)."""
    workspace = plan.workspace
    folders = [action.source]
    if workspace is not None and action.project in workspace.projects:
        # A wheel has no extras of its own: those of every binary built from its
        # source, selected or not, so its version does not follow the selection.
        extras = action.extras
        if action.kind == "wheel":
            extras = tuple(
                e for b in plan.manifest.binaries.values() if b.source == action.source
                for e in b.extras
            )  # fmt: skip
        folders += [lib.root for lib in workspace.closure(action.project, extras)]
    return folders


def version_inputs(plan: Plan) -> dict[str, Inputs]:
    """Each action's versioned inputs: its source and the folders of the in-repository
    libraries its project needs (transitively, with the binary's extras), without the
    other binaries' and projects' folders nested in them. A binary's wheel, zipapp and
    image share one set, and so one version.
    """
    root = plan.manifest.root
    by_id = {a.id: a for a in plan.actions}

    def rel(path: Path) -> str:
        text = path.relative_to(root).as_posix()
        return "" if text == "." else text

    found: dict[str, Inputs] = {}
    for action in plan.actions:
        own = by_id.get(action.deps[0], action) if action.deps else action
        include = tuple(dict.fromkeys(rel(f) for f in _folders(plan, action)))
        exclude = tuple(e for e in (rel(n) for n in own.nested) if e not in include)
        found[action.id] = Inputs(include, exclude)
    return found
