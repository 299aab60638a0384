"""What the loader read of a repository before it reads any requirement.

The pyproject.toml files found under the root, the name each `[project]` table gives, the
uv workspaces and uv.lock, and the problems recorded against each folder as the loader
goes (`_links`, `_dynamic` and `_load` add to them). A problem is kept, not raised: it
belongs to its project and is raised when that project is asked about.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from shipyard.workspace._discover import UvWorkspace
from shipyard.workspace._metadata import CoreMetadata, MetadataError
from shipyard.workspace._text import TomlFile, WorkspaceError
from shipyard.workspace.lock import Lock

__all__ = ["Scan"]


class Scan:
    """The parsed pyproject.toml files of a repository, their projects' names and the
    problems found so far, by folder."""

    def __init__(
        self,
        root: Path,
        files: dict[Path, TomlFile],
        broken: dict[Path, WorkspaceError],
        workspaces: dict[Path, UvWorkspace],
        lock: Lock | None,
    ) -> None:
        self.root = root
        self.files = files
        self.broken = broken
        self.workspaces = workspaces
        self.lock = lock
        self.problems: dict[Path, list[WorkspaceError]] = {}
        self.source_kinds: dict[Path, dict[str, str]] = {}
        self._workspace_of: dict[Path, UvWorkspace | None] = {}
        self.names: dict[Path, tuple[str, str]] = {}  # folder -> (name, key)
        for folder, file in files.items():
            table = file.data.get("project")
            if not isinstance(table, dict):
                continue
            name = table.get("name")
            if not isinstance(name, str) or not name:
                broken[folder] = WorkspaceError(
                    file.where(("project",), root=root),
                    "[project] has no name",
                    'add `name = "..."` to the [project] table',
                )
                continue
            self.names[folder] = (name, canonicalize_name(name))
        self.by_key: dict[str, list[Path]] = {}
        for folder, (_, key) in sorted(self.names.items()):
            self.by_key.setdefault(key, []).append(folder)
        self.core: dict[Path, CoreMetadata | MetadataError] = {}
        """The PEP 517 metadata of the projects whose requirements are dynamic."""

    def problem(self, folder: Path, error: WorkspaceError) -> None:
        """Record `error` against the project (or source tree) at `folder`."""
        self.problems.setdefault(folder, []).append(error)

    def workspace_of(self, folder: Path) -> UvWorkspace | None:
        """The uv workspace `folder` belongs to: the nearest one above that lists it
        (worked out once per folder: the loader asks for every requirement)."""
        try:
            return self._workspace_of[folder]
        except KeyError:
            pass
        found = None
        for candidate in (folder, *folder.parents):
            ws = self.workspaces.get(candidate)
            if ws is not None:
                found = ws if folder in ws.members else None
                break
            if candidate == self.root:
                break
        self._workspace_of[folder] = found
        return found

    def dynamic(self, folder: Path) -> tuple[str, ...]:
        """`[project].dynamic` of the project at `folder`, the strings of it."""
        listed = self.files[folder].data["project"].get("dynamic", [])
        return tuple(d for d in listed if isinstance(d, str)) if isinstance(listed, list) else ()

    def locked(self, folder: Path) -> dict[str, Any] | None:
        """uv.lock's `[[package]]` of the project at `folder`, when the lock covers it
        (the root project, or a member of the root's uv workspace)."""
        if self.lock is None or folder not in self.names:
            return None
        ws = self.workspace_of(folder)
        if folder != self.root and (ws is None or ws.root != self.root):
            return None
        return self.lock.member(self.names[folder][1])
