"""Which folder a manifest's paths belong to, and sources that lie in another's workspace.

A manifest belongs to the nearest folder, from its own up to the git work tree's top,
whose pyproject.toml declares a uv workspace: that workspace's uv.lock and members are
read from there and nowhere else. A binary whose source lies in a uv workspace below
that root would have them read from the wrong folder, so it is a problem.
"""

from __future__ import annotations

import re
from pathlib import Path

from shipyard.errors import Problem
from shipyard.manifest._report import dotted
from shipyard.manifest._yaml import Positions

__all__ = ["outside_its_workspace", "workspace_root"]

_UV_WORKSPACE = re.compile(r"^\s*\[\s*tool\s*\.\s*uv\s*\.\s*workspace\s*\]", re.MULTILINE)


def _declares_workspace(pyproject: Path) -> bool:
    """Whether `pyproject` holds a `[tool.uv.workspace]` table (read only when its text
    names one, so the common case costs a file read)."""
    try:
        text = pyproject.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    if "workspace" not in text:
        return False
    from shipyard import _toml

    try:
        tool = _toml.loads(text).get("tool", {})
    except ValueError:  # a broken pyproject is the workspace loader's to report
        return bool(_UV_WORKSPACE.search(text))
    uv = tool.get("uv") if isinstance(tool, dict) else None
    return isinstance(uv, dict) and isinstance(uv.get("workspace"), dict)


def outside_its_workspace(
    name: str, source: Path, root: Path, positions: Positions, problems: list[Problem]
) -> None:
    """A problem when the binary's source lies in a uv workspace below `root`: that
    workspace's uv.lock and members would be read from the wrong root (silently, the
    lock not at all), so binaries.yaml belongs in the workspace's folder."""
    folder = source if source.is_absolute() else root / source
    for candidate in (folder, *folder.parents):
        if candidate == root or not candidate.is_relative_to(root):
            return
        if _declares_workspace(candidate / "pyproject.toml"):
            rel = candidate.relative_to(root).as_posix()
            key = ("binaries", name, "source")
            problems.append(
                Problem(
                    positions.node(key).value,
                    dotted(key),
                    f"{folder.relative_to(root).as_posix()} is in the uv workspace {rel}/ "
                    "(its pyproject.toml "
                    "has [tool.uv.workspace]), whose uv.lock and members are read only "
                    "from its own folder",
                    f"move binaries.yaml into {rel}/ and make its paths relative to it",
                )
            )
            return


def workspace_root(manifest_dir: Path) -> Path:
    """The folder a manifest's paths, lock and dist/ belong to: the nearest folder from
    the manifest's own up to the git work tree's top whose pyproject.toml declares a uv
    workspace, else the manifest's folder. A workspace below the repository root
    (`python/` beside `docs/` and other trees) is its own root; git still answers for
    the whole repository (versions, `affected`)."""
    for folder in (manifest_dir, *manifest_dir.parents):
        if _declares_workspace(folder / "pyproject.toml"):
            return folder
        if (folder / ".git").exists():
            break
    return manifest_dir
