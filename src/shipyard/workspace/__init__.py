"""The Python projects of a repository, their in-repo dependencies and the root's uv.lock.

`load_workspace(root)` finds every project (a folder whose pyproject.toml has a `[project]`
table), links the requirements that name other projects of the repository (uv workspace
members, `path` sources, or plain names), and reads `uv.lock` when there is one: the
third-party slice each package needs, whether the lock is up to date, and its export as a
hash-pinned requirements file.
"""

from __future__ import annotations

from shipyard.workspace._load import load_workspace
from shipyard.workspace._text import Where, WorkspaceError
from shipyard.workspace.lock import (
    Lock,
    LockedPackage,
    check_lock,
    export_requirements,
)
from shipyard.workspace.projects import Dependency, Link, Project, Workspace

__all__ = [
    "Dependency",
    "Link",
    "Lock",
    "LockedPackage",
    "Project",
    "Where",
    "Workspace",
    "WorkspaceError",
    "check_lock",
    "export_requirements",
    "load_workspace",
]
