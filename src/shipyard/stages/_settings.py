"""Each project's test stages: what shipyard finds in the project, under what
binaries.yaml's `tests:` section says.

The defaults come from the project as its tools would read it: ruff's settings
(`[tool.ruff]`, `ruff.toml`, `.ruff.toml`) in the project's folder or any folder
above it up to the workspace root give a `lint` stage; mypy's (`[tool.mypy]`,
`mypy.ini`, `.mypy.ini`) in the project's own folder a `typecheck` stage; tests
(a `tests/` or `test/` folder, `conftest.py`, or pytest settings) a `unit` stage,
split into `unit` and `integration` when the project's pytest settings declare an
`integration` marker. binaries.yaml's `tests.stages` are merged over those for
every project, then `tests.projects.<name>` over that; `false` turns a stage (or a
whole project) off. A project whose folder holds other projects (a workspace's root
project) has only the stages `tests.projects.<name>` gives it.
"""

from __future__ import annotations

import re
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.errors import ManifestError, Problem, UsageError
from shipyard.manifest import Manifest, Stage, did_you_mean, locate
from shipyard.workspace import Project, Workspace

__all__ = [
    "DEFAULT_TIMEOUT",
    "STAGES",
    "Found",
    "holders",
    "project_stages",
    "stages_of",
    "tested",
]

# The well-known stages, in the order they are listed and run when nothing else decides.
STAGES = ("lint", "typecheck", "unit", "integration")
DEFAULT_TIMEOUT = 1800.0  # seconds: a stage that hangs fails after half an hour

_RUFF_FILES = ("ruff.toml", ".ruff.toml")
_MYPY_FILES = ("mypy.ini", ".mypy.ini")
_TEST_DIRS = ("tests", "test")
_INTEGRATION_MARKER = re.compile(r"^\s*integration\b")


@dataclass(frozen=True)
class Found:
    """One stage of one project: its settings, merged, and where they came from
    ("default": found in the project; "binaries.yaml": said there, maybe over a default)."""

    project: str
    stage: str
    settings: Stage
    origin: str


def _tool(data: Mapping[str, Any], *keys: str) -> Any:
    value: Any = data
    for key in keys:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _pyproject(folder: Path) -> Mapping[str, Any]:
    from shipyard import _toml

    try:
        return _toml.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}


def _ruff_configured(project: Project, top: Path) -> bool:
    folder = project.root
    while True:
        if any((folder / name).is_file() for name in _RUFF_FILES):
            return True
        if _tool(_pyproject(folder), "tool", "ruff") is not None:
            return True
        if folder in (top, folder.parent) or not folder.is_relative_to(top):
            return False
        folder = folder.parent


def _marks_integration(folder: Path, limit: int = 2000) -> bool:
    """Whether a test file of the project (in its test folders) marks a test integration."""
    seen = 0
    for name in _TEST_DIRS:
        for path in sorted((folder / name).rglob("*.py")) if (folder / name).is_dir() else ():
            seen += 1
            if seen > limit:
                return True  # too many to read: assume it has some
            try:
                if "mark.integration" in path.read_text(encoding="utf-8", errors="replace"):
                    return True
            except OSError:
                continue
    return False


def _detected(project: Project, top: Path) -> dict[str, Stage]:
    """The stages the project's own files imply."""
    found: dict[str, Stage] = {}
    data = _pyproject(project.root)
    if _ruff_configured(project, top):
        found["lint"] = Stage("ruff check .")
    if _tool(data, "tool", "mypy") is not None or any(
        (project.root / name).is_file() for name in _MYPY_FILES
    ):
        found["typecheck"] = Stage("python -m mypy .")
    pytest_settings = _tool(data, "tool", "pytest", "ini_options")
    has_tests = (
        any((project.root / name).is_dir() for name in _TEST_DIRS)
        or (project.root / "conftest.py").is_file()
        or (project.root / "pytest.ini").is_file()
        or pytest_settings is not None
    )
    if has_tests:
        markers = _tool(pytest_settings or {}, "markers") or []
        split = isinstance(markers, list) and any(
            isinstance(m, str) and _INTEGRATION_MARKER.match(m) for m in markers
        )
        # Without testpaths of its own, pytest is pointed at the test folder, as tox
        # configurations do: a benchmarks/ or scripts/ folder beside it is not collected.
        where = ""
        if _tool(pytest_settings or {}, "testpaths") is None:
            where = next((f" {n}" for n in _TEST_DIRS if (project.root / n).is_dir()), "")
        if split:
            found["unit"] = Stage(f'python -m pytest -m "not integration"{where}')
            if _marks_integration(project.root):
                found["integration"] = Stage(f"python -m pytest -m integration{where}")
        else:
            found["unit"] = Stage(f"python -m pytest{where}")
    return found


def _problem(
    manifest: Manifest, key: tuple[str | int, ...], message: str, hint: str, *, at_key: bool = False
) -> Problem:
    (where,) = locate(manifest, key, at_key=at_key)
    return Problem(where, ".".join(str(k) for k in key), message, hint)


def _check_names(manifest: Manifest, workspace: Workspace) -> None:
    """binaries.yaml names projects the workspace has: else exit 2 at the key."""
    problems = [
        _problem(
            manifest,
            ("tests", "projects", name),
            f"no project named {name!r} in the workspace",
            did_you_mean(name, workspace.projects)
            or "use a project's name from its pyproject.toml: "
            + ", ".join(sorted(workspace.projects)),
            at_key=True,
        )
        for name in manifest.tests.projects
        if name not in workspace.projects
    ]
    if problems:
        raise ManifestError(problems)


def holders(workspace: Workspace) -> frozenset[Path]:
    """The roots of the projects that hold another project in their folder (a
    workspace's root project): one pass over the projects' parent folders."""
    roots = {p.root for p in workspace.projects.values()}
    return frozenset(parent for root in roots for parent in root.parents if parent in roots)


def project_stages(
    manifest: Manifest,
    workspace: Workspace,
    project: Project,
    holding: frozenset[Path] | None = None,
) -> list[Found]:
    """The stages of `project`, well-known ones first, then the others by name.
    `holding` is `holders(workspace)`, passed when asking for many projects."""
    tests = manifest.tests
    own = tests.projects.get(project.key, {})
    if own is None:  # `<project>: false`
        return []
    # A project that holds the others (a workspace's root project) would lint and test
    # them all again: it has only the stages binaries.yaml gives it by name.
    holds = project.root in (holders(workspace) if holding is None else holding)
    detected = {} if holds else _detected(project, workspace.root)
    shared = {} if holds else tests.stages
    names = [*STAGES, *sorted((set(shared) | set(own)) - set(STAGES))]
    found: list[Found] = []
    for name in names:
        settings, origin = _layered(name, detected, shared, own)
        if settings is None:
            continue
        if settings.command is None:
            where = (
                ("tests", "projects", project.key, name)
                if name in own
                else ("tests", "stages", name)
            )
            raise ManifestError(
                [
                    _problem(
                        manifest,
                        where,
                        f"stage {name!r} of {project.key} has no command (shipyard found "
                        "no default for it in the project)",
                        "add command:, e.g. command: python -m pytest",
                    )
                ]
            )
        found.append(Found(project.key, name, _filled(settings), origin))
    return found


def _layered(
    name: str,
    detected: Mapping[str, Stage],
    shared: Mapping[str, Stage | None],
    own: Mapping[str, Stage | None],
) -> tuple[Stage | None, str]:
    """Stage `name`'s settings, binaries.yaml's `tests.stages` (`shared`) and then the
    project's own entry over what shipyard found in the project, and where they came
    from ("default", "binaries.yaml"); None when no layer has it or one turns it off."""
    settings: Stage | None = detected.get(name)
    origin = "default" if settings is not None else ""
    for layer in (shared, own):
        if name not in layer:
            continue
        entry = layer[name]
        if entry is None:
            settings, origin = None, ""
            continue
        if layer is shared and settings is None and entry.command is None:
            continue  # settings for every project that has this stage: this one has none
        settings = entry.over(settings or Stage())
        origin = "binaries.yaml"
    return settings, origin


def _filled(settings: Stage) -> Stage:
    """`settings` with shipyard's defaults for what they leave unsaid."""
    return Stage(
        settings.command,
        settings.groups,
        types.MappingProxyType(dict(settings.env or {})),
        settings.timeout or DEFAULT_TIMEOUT,
        settings.services or (),
        settings.requirements or (),
    )


# A project's normalised name (PEP 503): it names folders and files under dist/ and
# .shipyard/envs, so nothing else is used.
_KEY = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


def tested(workspace: Workspace) -> list[str]:
    """The projects that have stages: the uv workspace's members (the root project
    among them), or every project found when the repository is no uv workspace. A
    project whose name is no valid package name is exit 2, naming its pyproject.toml."""
    keys = [k for k in workspace.members if k in workspace.projects] or list(workspace.projects)
    for key in keys:
        if not _KEY.match(key):
            project = workspace.projects[key]
            raise UsageError(
                f"{project.pyproject}: [project].name {project.name!r} is not a package "
                "name (letters, digits and . _ - between them, PEP 508); rename the project"
            )
    return sorted(keys)


def stages_of(manifest: Manifest, workspace: Workspace) -> dict[str, list[Found]]:
    """Every tested project's stages by project key, in key order."""
    _check_names(manifest, workspace)
    holding = holders(workspace)
    return {
        key: project_stages(manifest, workspace, workspace.projects[key], holding)
        for key in tested(workspace)
    }
