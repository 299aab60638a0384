"""From a manifest and a selection to the plan: the repository's projects read, the
lock checked, and `--since` applied. The one way the CLI and the release plan."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from shipyard.engine.plan import Plan, Selection, make_plan
from shipyard.manifest import Manifest
from shipyard.workspace import Workspace, check_lock, load_workspace

__all__ = [
    "check_pythons",
    "load_projects",
    "lock_keys",
    "plan_for",
    "read_workspace",
]


def load_projects(
    manifest: Manifest, *, cache_dir: Path | None = None, env: Mapping[str, str] | None = None
) -> Workspace:
    """The manifest's repository's projects, dynamic metadata included: a project whose
    requirements only its backend can tell is asked once per change of its files, the
    answer kept under `cache_dir` (default: --cache-dir's default) and its files' hashes
    in dist/ (remembered by stat facts, as a build's sources are)."""
    from shipyard.dist import dist_dir, metadata_inputs_file
    from shipyard.engine.cache.local import METADATA, default_cache_dir
    from shipyard.files.statcache import StatMemo
    from shipyard.process import installer_env

    environ = os.environ if env is None else env
    cache = cache_dir if cache_dir is not None else default_cache_dir(None, environ)
    memo = StatMemo(metadata_inputs_file(dist_dir(manifest.root)), settle_ns=2_000_000_000)
    workspace = load_workspace(
        manifest.root, cache_dir=cache / METADATA, env=installer_env(environ), memo=memo
    )
    if memo.path.parent.is_dir():  # never a dist/ made by reading
        with contextlib.suppress(OSError):  # a memo not saved costs a rehash, nothing more
            memo.save()
    return workspace


def check_pythons(manifest: Manifest, workspace: Workspace, binaries: Iterable[str]) -> None:
    """Raise a ManifestError (exit 2) at `project.python` when a target Python that a
    zipapp or image of `binaries` installs uv.lock's slice for is outside the lock's
    `requires-python`: uv resolved nothing for it, so versions it locked may have no
    wheel for that Python (or need a newer one) and the install would fail later."""
    lock = workspace.lock
    if lock is None or lock.requires_python is None:
        return
    users = [
        name
        for name in binaries
        if manifest.binaries[name].requirements is None
        and {"zipapp", "image"} & set(manifest.binaries[name].outputs)
        and workspace.project_at(manifest.binaries[name].source) is not None
    ]
    if not users:
        return
    spec = lock.requires_python
    outside = [
        py
        for py in manifest.project.pythons
        if not any(spec.contains(f"{py}.{patch}", prereleases=True) for patch in (0, 99))
    ]
    if not outside:
        return
    from shipyard.errors import ManifestError, Problem
    from shipyard.manifest import locate

    (at,) = locate(manifest, ("project", "python"))
    raise ManifestError(
        [
            Problem(
                at,
                "project.python",
                f"Python {outside[0]} is outside uv.lock's requires-python ({spec}), which "
                f"{users[0]} installs from: uv locked nothing for it, so its wheels may not "
                "exist",
                "target a Python the lock allows, or widen requires-python in "
                "pyproject.toml and run `uv lock`",
            )
        ]
    )


def lock_keys(manifest: Manifest, workspace: Workspace, binaries: Iterable[str]) -> set[str]:
    """The projects `binaries` install: each one's project and its in-repo closure."""
    keys: set[str] = set()
    for name in binaries:
        binary = manifest.binaries[name]
        project = workspace.project_at(binary.source)
        if project is not None:
            keys.add(project.key)
            keys.update(p.key for p in workspace.closure(project.key, binary.extras))
    return keys


def _check_lock(
    manifest: Manifest, workspace: Workspace, binaries: Iterable[str], env: Mapping[str, str]
) -> None:
    from shipyard.dist import dist_dir, lock_check_file

    status = check_lock(
        workspace,
        lock_keys(manifest, workspace, binaries),
        env=env,
        memo=lock_check_file(dist_dir(manifest.root)),
    )
    workspace.lock_status.append(status)


def read_workspace(
    manifest: Manifest,
    binaries: Iterable[str] | None = None,
    *,
    cache_dir: Path | None = None,
) -> Workspace:
    """The projects of the manifest's repository and its uv.lock, checked for what the
    `binaries` (default: all of the manifest's) build from: each one's project and the
    libraries it needs (with its extras), then the lock (WorkspaceError, exit 2, naming
    the pyproject.toml and line). Broken projects no binary uses are left alone."""
    workspace = load_projects(manifest, cache_dir=cache_dir)
    names = list(manifest.binaries if binaries is None else binaries)
    for name in names:
        binary = manifest.binaries[name]
        project = workspace.project_at(binary.source)
        if project is not None:
            workspace.check(project.key, binary.extras)
    check_pythons(manifest, workspace, names)
    if workspace.lock is not None:
        _check_lock(manifest, workspace, names, os.environ)
    return workspace


def plan_for(
    manifest: Manifest,
    selection: Selection,
    *,
    since: str | None = None,
    env: Mapping[str, str] | None = None,
    cache_dir: Path | None = None,
) -> Plan:
    """The plan of `selection`; with `since` (a git ref), only the selected binaries
    whose inputs changed since then (`shipyard.engine.affected`)."""
    workspace = load_projects(manifest, cache_dir=cache_dir, env=env)
    plan = make_plan(manifest, selection, workspace=workspace)  # raises for what it uses
    check_pythons(manifest, workspace, plan.binary_names)
    if workspace.lock is not None:
        _check_lock(manifest, workspace, plan.binary_names, os.environ if env is None else env)
    if not since:
        return plan
    from shipyard.engine.affected import affected

    found = affected(manifest, workspace, since, plan.binary_names, env=env)
    names = tuple(a.binary for a in found)
    if not names:
        return Plan(manifest, (), (), plan.skips, workspace)
    narrowed = Selection(binaries=names, outputs=selection.outputs, platforms=selection.platforms)
    return make_plan(manifest, narrowed, workspace=workspace)
