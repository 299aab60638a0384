"""Which stages a `shipyard test` runs: the selection, and with --since the projects
whose inputs changed, each with its reasons.

A stage's inputs (see `_runner.StageRunner.inputs`) are its project's files, those of
the in-repo libraries it installs (its dependencies, transitively, and those its
dependency groups name), the tool settings in the folders above it up to the
workspace root (`SHARED_CONFIG`), its locked slice and groups in uv.lock, and its
entry in binaries.yaml. `--since` reads the same list from git's changed files, so a
library edit selects every project that installs it, with the chain as the reason.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from shipyard.engine.plan import Action, Plan
from shipyard.engine.reasons import Reason
from shipyard.errors import UsageError
from shipyard.manifest import Manifest, did_you_mean
from shipyard.stages._settings import STAGES, Found, stages_of
from shipyard.workspace import Lock, Workspace, WorkspaceError

__all__ = ["SHARED_CONFIG", "TestPlan", "TestSelection", "affected_projects", "plan_tests"]

# Files in a folder above a project (up to the workspace root) that its tools read:
# pyproject.toml's [tool.*] tables, ruff's, mypy's and pytest's own files.
SHARED_CONFIG = (
    "pyproject.toml",
    "ruff.toml",
    ".ruff.toml",
    "mypy.ini",
    ".mypy.ini",
    "setup.cfg",
    "pytest.ini",
    "tox.ini",
    "conftest.py",
)


@dataclass(frozen=True)
class TestSelection:
    """What `shipyard test` was asked for."""

    __test__ = False  # not a pytest test class, whatever its name

    stages: tuple[str, ...] = ()
    projects: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    since: str | None = None
    args: tuple[str, ...] = ()  # after `--`: passed to every selected stage's command


@dataclass(frozen=True)
class TestPlan:
    """The stage actions to run, and with --since why each project is in."""

    __test__ = False

    plan: Plan
    found: Mapping[str, list[Found]]
    reasons: Mapping[str, tuple[Reason, ...]] = field(default_factory=dict)


def _rel(path: Path, root: Path) -> str:
    text = path.relative_to(root).as_posix()
    return "." if text == "" else text


def libraries(workspace: Workspace, key: str) -> tuple[str, ...]:
    """The in-repo projects a stage of `key` installs: its dependencies (every extra, as
    tests may use any) and what its dependency groups name in uv.lock, transitively."""
    project = workspace.projects[key]
    found = {p.key for p in workspace.closure(key, project.extras)}
    lock = workspace.lock
    if lock is not None and key in lock.members:
        for name in lock.groups(key, root_projects(workspace))[1]:
            if name in workspace.projects:
                found.add(name)
                found.update(p.key for p in workspace.closure(name))
    found.discard(key)
    return tuple(sorted(found))


def root_projects(workspace: Workspace) -> tuple[str, ...]:
    """The workspace root's project (whose `dev` group a stage installs by default),
    when the root is one."""
    root = workspace.project_at(workspace.root)
    return (root.key,) if root is not None else ()


def _nested(workspace: Workspace, key: str) -> tuple[Path, ...]:
    root = workspace.projects[key].root
    return tuple(
        sorted(
            p.root
            for p in workspace.projects.values()
            if p.root != root and p.root.is_relative_to(root)
        )
    )


def _check(flag: str, values: Sequence[str], known: Sequence[str]) -> None:
    for value in values:
        if value not in known:
            hint = did_you_mean(value, known) or "choose from: " + ", ".join(known)
            raise UsageError(f"{flag}={value}: unknown; {hint}")


def plan_tests(manifest: Manifest, workspace: Workspace, selection: TestSelection) -> TestPlan:
    """The stage actions of the selection, in project then stage order."""
    found = stages_of(manifest, workspace)
    every_stage = sorted({f.stage for stages in found.values() for f in stages} | set(STAGES))
    _check("--stage", selection.stages, every_stage)  # a well-known stage no project has: none
    _check("--project", selection.projects, sorted(workspace.projects))
    _check("--target", selection.targets, sorted(manifest.groups))
    wanted: set[str] = set(selection.projects)
    for target in selection.targets:
        for name in manifest.groups[target]:
            project = workspace.project_at(manifest.binaries[name].source)
            if project is not None:
                wanted.add(project.key)
                wanted.update(libraries(workspace, project.key))
    chosen = [k for k in found if not wanted or k in wanted]
    reasons: dict[str, tuple[Reason, ...]] = {}
    if selection.since is not None:
        reasons = affected_projects(manifest, workspace, selection.since, chosen)
        chosen = [k for k in chosen if k in reasons]
    actions: list[Action] = []
    for key in chosen:
        project = workspace.projects[key]
        for stage in found[key]:
            if selection.stages and stage.stage not in selection.stages:
                continue
            settings = stage.settings
            actions.append(
                Action(
                    f"test:{key}:{stage.stage}",
                    "test",
                    (),
                    project.root,
                    nested=_nested(workspace, key),
                    project=key,
                    pythons=(manifest.project.python,),
                    stage=stage.stage,
                    test=settings,
                )
            )
    plan = Plan(manifest, (), tuple(actions), (), workspace)
    tested = {a.project for a in actions}
    return TestPlan(plan, found, {k: v for k, v in reasons.items() if k in tested})


def _above(workspace: Workspace, key: str) -> list[str]:
    """The folders above project `key` up to the workspace root, relative to the
    workspace root ('.' for it)."""
    root = workspace.root
    folder = workspace.projects[key].root
    out: list[str] = []
    while folder != root and folder.is_relative_to(root):
        folder = folder.parent
        out.append(_rel(folder, root))
    return out


def affected_projects(
    manifest: Manifest, workspace: Workspace, since: str, keys: Sequence[str]
) -> dict[str, tuple[Reason, ...]]:
    """The projects of `keys` whose stages' inputs changed since commit `since`, each
    with its reasons (source, library, config, lock, manifest)."""
    from shipyard.engine.changes import changes as _changes
    from shipyard.engine.changes import file_at as _show
    from shipyard.files.sources import never_input as _never_input

    root = workspace.root
    sha, changed = _changes(root, since)
    changed = tuple(p for p in changed if not _never_input(p))
    manifest_rel = _rel(manifest.path, root)
    lock_path = workspace.lock.path if workspace.lock is not None else root / "uv.lock"
    lock_rel = _rel(lock_path, root)
    reasons: dict[str, set[Reason]] = {k: set() for k in keys}
    touched = _touched(workspace, [p for p in changed if p not in (manifest_rel, lock_rel)])
    users = {k: libraries(workspace, k) for k in keys}
    for library, paths in touched.items():
        if library in reasons:
            reasons[library].update(Reason("source", p) for p in paths)
        for key in keys:
            if library in users[key]:
                via = _chain(workspace, key, library)
                reasons[key].update(Reason("library", p, via) for p in paths)
    _config_reasons(workspace, changed, reasons)
    if lock_rel in changed:
        _lock_changes(workspace, _show(root, sha, lock_rel), lock_path, lock_rel, since, reasons)
    if manifest_rel in changed:
        before = _tests_section(_show(root, sha, manifest_rel))
        after = _tests_section(manifest.path.read_bytes())
        if before != after:
            for key in keys:
                reasons[key].add(
                    Reason("manifest", manifest_rel, detail="its tests: section changed")
                )

    order = ("source", "library", "config", "lock", "manifest")
    return {
        key: tuple(sorted(found, key=lambda r: (order.index(r.kind), r.path, r.via)))
        for key, found in reasons.items()
        if found
    }


def _touched(workspace: Workspace, changed: Sequence[str]) -> dict[str, list[str]]:
    """The changed paths by the deepest project holding each, a build's own output
    (dist/, build/ at the project's top) left out."""
    from shipyard.files.sources import build_output as _output

    folders = {_rel(p.root, workspace.root): k for k, p in workspace.projects.items()}

    def owner(path: str) -> str | None:
        folder = path
        while folder:
            folder = posixpath.dirname(folder)
            if (folder or ".") in folders:
                return folders[folder or "."]
        return None

    touched: dict[str, list[str]] = {}
    for path in changed:
        key = owner(path)
        if key is not None:
            if _output(path, folders_rel(workspace, key)):
                continue  # a build's own output (dist/, build/ at the project's top)
            touched.setdefault(key, []).append(path)
    return touched


def _config_reasons(
    workspace: Workspace, changed: Sequence[str], reasons: dict[str, set[Reason]]
) -> None:
    """A reason for each project of `reasons` below a changed tool settings file."""
    for path in changed:
        folder, name = posixpath.split(path)
        if name not in SHARED_CONFIG:
            continue
        for key, found in reasons.items():
            if (folder or ".") in _above(workspace, key):
                found.add(Reason("config", path, detail="tool settings above the project"))


def _lock_changes(
    workspace: Workspace,
    old: bytes | None,
    lock_path: Path,
    lock_rel: str,
    since: str,
    reasons: dict[str, set[Reason]],
) -> None:
    """A reason for each project of `reasons` whose locked slice or dependency groups
    differ from uv.lock's text `old`."""
    from shipyard.engine.reasons import lock_reasons as _lock_reasons

    members = {k: k for k in reasons if workspace.lock is None or k in workspace.lock.members}
    slices = _lock_reasons(
        workspace, members, dict.fromkeys(members, frozenset()), old, lock_path, lock_rel, since
    )
    for key, reason in slices.items():
        reasons[key].add(reason)
    for key in _group_changes(workspace, members, old, lock_path):
        reasons[key].add(Reason("lock", lock_rel, detail="a dependency group's locked set changed"))


def folders_rel(workspace: Workspace, key: str) -> str:
    """Project `key`'s folder relative to the workspace root ('.' for the root)."""
    return _rel(workspace.projects[key].root, workspace.root)


def _chain(workspace: Workspace, key: str, library: str) -> tuple[str, ...]:
    """A shortest chain of project names from `key` down to `library`."""
    chains = workspace.requirers(library)
    best = [chain for (owner, _), chain in chains.items() if owner == key]
    chain = min(best, key=len) if best else (library,)
    return chain if chain[:1] == (key,) else (key, *chain)


def _group_changes(
    workspace: Workspace, keys: Mapping[str, str], old: bytes | None, path: Path
) -> list[str]:
    new = workspace.lock
    if new is None or old is None:
        return []
    try:
        then = Lock.parse(old.decode(), path)
    except (WorkspaceError, UnicodeDecodeError):
        return list(keys)
    out = []
    for key in keys:
        try:
            before = then.groups(key)[0]
        except WorkspaceError:
            before = "?"
        if before != new.groups(key)[0]:
            out.append(key)
    return out


def _tests_section(data: bytes | None) -> object:
    """binaries.yaml's `tests:` as written (None when unreadable or absent)."""
    if data is None:
        return None
    try:
        loaded = yaml.safe_load(data)
    except yaml.YAMLError:
        return "unreadable"
    return loaded.get("tests") if isinstance(loaded, dict) else None
