"""`shipyard init`: a first binaries.yaml, written from the repository's projects.

Every console script (`[project.scripts]`) and GUI script (`[project.gui-scripts]`) of
a project of the repository's own uv workspace (every project, when the root is no
workspace) becomes a binary, with its source folder, entry point and outputs. Projects
without scripts are libraries: shipyard finds them from the workspace, so they are not
listed. Groups and image settings are left as commented choices. Fixtures and templates
elsewhere in the tree (a `pyproject.toml` that is no member) are not binaries.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from shipyard.entrypoints import own_entrypoint_problem
from shipyard.workspace import Project, Workspace

__all__ = ["FirstManifest", "first_manifest"]

_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$")
_ENTRY = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*:\s*([A-Za-z_][\w.]*)\s*(\[.*\])?\s*$")


@dataclass(frozen=True)
class FirstManifest:
    """The text written, and what it holds."""

    text: str
    binaries: int
    projects: int
    skipped: tuple[str, ...]


def _binary_name(script: str) -> str:
    name = re.sub(r"[^a-z0-9._-]+", "-", script.lower()).strip("-._")[:64].strip("-._")
    return name or "app"


def _python(workspace: Workspace) -> str:
    """This interpreter's minor version if uv.lock allows it, else the oldest it allows."""
    here = "{}.{}".format(*sys.version_info[:2])
    spec = workspace.lock.requires_python if workspace.lock else None
    if spec is None:
        return here
    allowed = [f"3.{m}" for m in range(9, 16) if spec.contains(f"3.{m}.99", prereleases=True)]
    return here if here in allowed or not allowed else allowed[0]


def _scripts(project: Project, workspace: Workspace) -> list[tuple[str, str]] | str:
    """(script, entry point) of `project`, or why they cannot be read."""
    table = workspace._files[project.root].data.get("project", {})
    found: list[tuple[str, str]] = []
    dynamic = {"scripts", "gui-scripts"} & set(project.dynamic)
    if dynamic and project.core is None:
        return f"{', '.join(sorted(dynamic))} dynamic"
    if project.core is not None and dynamic:
        return [*project.core.scripts, *project.core.gui_scripts]
    for key in ("scripts", "gui-scripts"):
        listed = table.get(key, {})
        if isinstance(listed, dict):
            found.extend((str(k), str(v)) for k, v in listed.items())
    return found


def first_manifest(workspace: Workspace, folder: Path) -> FirstManifest:
    """The binaries.yaml for the repository of `workspace`, to be written in `folder`."""
    own = set(workspace.members) or set(workspace.projects)
    projects = sorted((p for k, p in workspace.projects.items() if k in own), key=lambda p: p.root)
    used: set[str] = set()
    entries: list[str] = []
    skipped: list[str] = []
    for project in projects:
        _add_binaries(project, workspace, used, entries, skipped)
    text = "\n".join(_header(workspace, used, skipped, bool(entries))) + "\n" + "".join(entries)
    return FirstManifest(text, len(used), len(projects), tuple(skipped))


def _add_binaries(
    project: Project, workspace: Workspace, used: set[str], entries: list[str], skipped: list[str]
) -> None:
    """Add a binary entry for each script of `project` that can run, its name to `used`,
    and a note to `skipped` for each that cannot (or all, when they cannot be read)."""
    root = workspace.root
    scripts = _scripts(project, workspace)
    where = project.root.relative_to(root).as_posix() if project.root != root else "."
    if isinstance(scripts, str):
        skipped.append(f"{where} ({scripts}: add its binaries by hand)")
        return
    for script, target in sorted(scripts):
        match = _ENTRY.match(target)
        if not match:
            skipped.append(f"{where}: script {script} = {target!r} is not module:function")
            continue
        entry = f"{match.group(1)}:{match.group(2)}"
        problem = own_entrypoint_problem(project.root, entry, f"{where}")
        if problem:  # a script that cannot run: `check` would refuse it
            skipped.append(f"{where}: script {script} = {target!r}: {problem}")
            continue
        name = _binary_name(script)
        if name in used or not _NAME.match(name):
            name = _binary_name(f"{project.key}-{script}")
        while name in used:
            name = _binary_name(f"{name}-{len(used)}")
        used.add(name)
        entries.append(
            f"  {name}:\n    source: {where}\n"
            f"    entrypoint: {match.group(1)}:{match.group(2)}\n"
            "    outputs: [wheel, zipapp]            # add image once defaults.image is set\n"
        )


def _header(workspace: Workspace, used: set[str], skipped: list[str], listed: bool) -> list[str]:
    """The lines above the binaries: the project, commented defaults and groups, the
    scripts not listed, and the `binaries:` key (`listed`: with entries to follow)."""
    root = workspace.root
    top = workspace.projects.get(workspace.members[0]) if workspace.members else None
    named = root.name if top is None or top.root != root else top.name
    project_name = _binary_name(named)
    lines = [
        "# A first binaries.yaml, written by `shipyard init` from the repository's projects:",
        "# each console script is a binary. Libraries (projects without scripts) are found",
        "# from the workspace: list one here only to publish its wheel.",
        "# Check it with `shipyard check`; `shipyard schema > binaries.schema.json` gives",
        "# editors the schema (yaml-language-server: $schema=binaries.schema.json).",
        "schema: 1",
        "project:",
        f"  name: {project_name}",
        "  version: git                     # PEP 440 from git describe; --version overrides",
        f'  python: "{_python(workspace)}"',
        "# defaults:",
        "#   platforms: [linux/amd64, linux/arm64]",
        "#   image:",
        '#     base: "registry.example:5000/python:3.12"',
        f'#     hubs: ["registry.example:5000/{project_name}"]',
    ]
    if used:
        lines += ["# groups:", f"#   standard: [{', '.join(sorted(used))}]"]
    for note in skipped:
        lines.append(f"# not listed: {note}")
    lines.append("binaries:" if listed else "binaries: {}")
    return lines
