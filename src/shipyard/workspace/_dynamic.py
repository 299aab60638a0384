"""The requirements of projects that declare them dynamic (`[project].dynamic`).

uv.lock tells them when it records the project (a member of the root's uv workspace, or
the root project); else the project's PEP 517 backend does, run once for every such
project not cached (see `_metadata`). Either answer is a list of Requires-Dist lines,
each placed at the `dynamic` entry that made the requirements dynamic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.utils import canonicalize_name

from shipyard.workspace._metadata import CoreMetadata, MetadataError, read_metadata
from shipyard.workspace._scan import Scan
from shipyard.workspace._text import Where, WorkspaceError

if TYPE_CHECKING:
    from shipyard.files.statcache import StatMemo

__all__ = ["REQUIREMENTS", "Listed", "backend_metadata", "dynamic_requirements"]

REQUIREMENTS = frozenset({"dependencies", "optional-dependencies"})
"""The `[project].dynamic` entries that make a project's requirements dynamic."""
_EXTRA = re.compile(r"""\bextra\s*==\s*['"]([^'"]+)['"]""")

Listed = list[tuple[str, object, Where]]
"""Requirements as read: (extra, "" for a plain one; the text; where it is written)."""


def _extras_of(text: str) -> tuple[str, ...]:
    """The extras a Requires-Dist line belongs to, from its `extra == "x"` markers; ("",)
    for a plain requirement."""
    _, _, marker = text.partition(";")
    found = sorted({canonicalize_name(e) for e in _EXTRA.findall(marker)})
    return tuple(found) or ("",)


def _locked_text(entry: Mapping[str, object]) -> str | None:
    """A uv.lock `requires-dist` entry as the PEP 508 line it was locked from (enough to
    name the project, its extras and markers; the source lives beside it in the lock)."""
    name = entry.get("name")
    if not isinstance(name, str):
        return None
    extras = entry.get("extras")
    chosen = f"[{','.join(str(e) for e in extras)}]" if isinstance(extras, list) and extras else ""
    specifier = entry.get("specifier")
    marker = entry.get("marker")
    text = f"{name}{chosen}{specifier if isinstance(specifier, str) else ''}"
    return f"{text} ; {marker}" if isinstance(marker, str) and marker else text


def backend_metadata(
    scan: Scan, cache_dir: Path | None, env: Mapping[str, str] | None, memo: StatMemo | None
) -> dict[Path, CoreMetadata | MetadataError]:
    """The PEP 517 metadata of every project whose requirements are dynamic and that
    uv.lock does not record, in one backend run for those not cached."""
    wanted = [
        folder
        for folder in sorted(scan.names)
        if REQUIREMENTS & set(scan.dynamic(folder)) and scan.locked(folder) is None
    ]
    if not wanted:
        return {}
    from shipyard.errors import UsageError
    from shipyard.files.sources import GitIgnored, tree_hash

    git = GitIgnored(scan.root).prefetch()
    digests: dict[Path, str] = {}
    failed: dict[Path, CoreMetadata | MetadataError] = {}
    for folder in wanted:
        nested = tuple(f for f in scan.files if f != folder and f.is_relative_to(folder))
        try:
            digests[folder] = tree_hash(folder, exclude=nested, root=scan.root, git=git, memo=memo)
        except UsageError as error:
            failed[folder] = MetadataError(str(error))
    return {**failed, **read_metadata(digests, cache_dir=cache_dir, env=env)}


def _from_lock(package: Mapping[str, Any]) -> tuple[list[str], set[str]]:
    """The Requires-Dist lines and extras uv.lock records for its `[[package]]`."""
    texts: list[str] = []
    declared: set[str] = set()
    metadata = package.get("metadata", {})
    metadata = metadata if isinstance(metadata, dict) else {}
    for entry in metadata.get("requires-dist", []):
        text = _locked_text(entry) if isinstance(entry, dict) else None
        if text is not None:
            texts.append(text)
    listed = metadata.get("provides-extras", [])
    declared.update(canonicalize_name(e) for e in listed if isinstance(e, str))
    declared.update(canonicalize_name(e) for e in package.get("optional-dependencies", {}) or {})
    return texts, declared


def dynamic_requirements(
    scan: Scan, folder: Path, dynamic: tuple[str, ...]
) -> tuple[str, CoreMetadata | None, set[str], Listed] | None:
    """The requirements of a project whose `[project].dynamic` names them: where they
    were read ("uv.lock" or "backend"), the backend's metadata when it was asked, the
    extras declared and the requirements. uv.lock's record when the lock covers the
    project, else its backend's metadata. Each requirement is placed at the `dynamic`
    entry that made it so. None, with a problem recorded, when the backend could not
    tell."""
    file = scan.files[folder]
    index = next(i for i, d in enumerate(dynamic) if d in REQUIREMENTS)
    where = file.where(("project", "dynamic", index), ("project",), root=scan.root)
    package = scan.locked(folder)
    core: CoreMetadata | None = None
    if package is not None:
        texts, declared = _from_lock(package)
        origin = "uv.lock"
    else:
        answer = scan.core.get(folder)
        if not isinstance(answer, CoreMetadata):
            problem = answer.problem if answer else "it was not asked"
            scan.problem(
                folder,
                WorkspaceError(
                    where,
                    f"`{scan.names[folder][0]}` declares its requirements dynamic and its "
                    f"PEP 517 backend could not give its metadata: {problem}",
                    "make `python -m build --wheel` work in this folder, or run `uv lock` "
                    "so uv.lock records its requirements",
                ),
            )
            return None
        texts = list(answer.requires_dist)
        declared = {canonicalize_name(e) for e in answer.provides_extra}
        origin, core = "backend", answer
    rows: Listed = []
    for text in texts:
        for extra in _extras_of(text):
            declared.update({extra} - {""})
            rows.append((extra, text, where))
    return origin, core, declared, rows
