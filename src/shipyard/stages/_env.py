"""The environment a stage runs in: made from the lock, one per project and groups.

With uv.lock (the project a member of it), `uv sync --frozen --package P` into
`<workspace>/.shipyard/envs/<project>[+groups]`: the project and its in-repo
libraries editable, its locked third-party slice and its dependency groups (those
the stage names, else `dev` when the project or the workspace root declares one),
exactly as locked; warm, uv
does this in milliseconds. Without a lock, a virtual environment with the project
and its libraries installed editable and their groups resolved by uv, redone only
when a pyproject.toml it was made from changes. Never shipyard's own environment.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path

from shipyard._fs import atomic_write, exclusive
from shipyard.engine.context import BuildContext
from shipyard.engine.plan import Action
from shipyard.errors import ShipyardError, UsageError
from shipyard.process import installer_env, run_logged, uv_binary

__all__ = ["ENVS", "env_dir", "environment"]

ENVS = Path(".shipyard") / "envs"  # under the workspace root: never a source, git-ignored
_MARKER = ".shipyard-env"
_guard = threading.Lock()
_held: dict[Path, threading.Lock] = {}


def env_dir(action: Action, ctx: BuildContext) -> Path:
    """Where the environment of `action`'s project and groups lives."""
    assert ctx.workspace is not None and action.test is not None
    groups = action.test.groups
    name = action.project + ("+" + "+".join(groups) if groups else "")
    if action.test.requirements:
        files = "\0".join(action.test.requirements).encode()
        name += "+r" + hashlib.sha256(files).hexdigest()[:8]
    return ctx.workspace.root / ENVS / name


def _lock_for(path: Path) -> threading.Lock:
    with _guard:
        return _held.setdefault(path, threading.Lock())


def _uv() -> str:
    uv = uv_binary()
    if uv is None:
        raise UsageError("test stages make their environments with uv; pip install uv")
    return uv


def environment(action: Action, ctx: BuildContext, log: Path) -> Path:
    """Make or bring up to date the environment of `action` (a test stage); return it.

    Stages of one project and groups share it, one at a time (a thread lock, and a
    file lock against another shipyard in the same checkout)."""
    workspace = ctx.workspace
    assert workspace is not None and action.test is not None
    where = env_dir(action, ctx)
    where.parent.mkdir(parents=True, exist_ok=True)
    # uv as a developer runs it (a version backend reads git itself), without
    # shipyard's secrets or installer settings shipyard did not choose.
    env = installer_env(ctx.env)
    env.pop("VIRTUAL_ENV", None)
    python = action.pythons[0] if action.pythons else ctx.python
    with _lock_for(where), exclusive(where.parent / f".{where.name}.lock"):
        lock = workspace.lock
        if lock is not None and action.project in lock.members:
            member = lock.member(action.project)
            name = str(member["name"]) if member else action.project
            command = [_uv(), "sync", "--frozen", "--package", name, "--python", python]
            for group in stage_groups(action, ctx):
                command += ["--group", group]
            files = _requirement_files(action, ctx.root)
            if files:  # installed over the lock's packages below: keep them on the next sync
                command.append("--inexact")
            env["UV_PROJECT_ENVIRONMENT"] = str(where)
            wanted = _fresh_for(where, files)
            _run(command, log, env, workspace.root, f"uv sync of {action.project}")
            if files:
                pip = [_uv(), "pip", "install", "--python", str(where / "bin" / "python")]
                for file in files:
                    pip += ["-r", str(file)]
                _run(pip, log, env, workspace.root, f"installing {action.project}'s requirements")
                marker = where / ".shipyard-requirements"
                atomic_write(marker, wanted.encode(), durable=False)
        else:
            _unlocked(action, ctx, where, python, env, log)
    return where


def _declares(folder: Path, group: str) -> bool:
    """Whether the pyproject.toml in `folder` declares the dependency group `group`."""
    from shipyard.stages._settings import _pyproject, _tool

    return _tool(_pyproject(folder), "dependency-groups", group) is not None


def stage_groups(action: Action, ctx: BuildContext) -> tuple[str, ...]:
    """The dependency groups a stage installs: those it names; else `dev` when the
    project or the workspace root declares one (uv installs a root's `dev` with a
    member's only when it is named, and a workspace's test tools often live there)."""
    assert action.test is not None and ctx.workspace is not None
    if action.test.groups is not None:
        return action.test.groups
    folders = (action.source, ctx.workspace.root)
    return ("dev",) if any(_declares(folder, "dev") for folder in folders) else ()


def _requirement_files(action: Action, root: Path) -> list[Path]:
    """The stage's requirements files, each checked to exist inside the repository at
    `root` (their lines end up in logs and test reports CI uploads)."""
    assert action.test is not None
    files = [action.source / name for name in action.test.requirements or ()]
    for file in files:
        if not file.resolve().is_relative_to(root.resolve()):
            raise UsageError(
                f"{file}: the requirements file of the {action.stage} stage of "
                f"{action.project} is outside the repository ({root}); name a file inside it"
            )
        if not file.is_file():
            raise UsageError(
                f"{file}: no such requirements file for the {action.stage} stage of "
                f"{action.project}; add it, or set tests.projects.{action.project}."
                f"{action.stage}.requirements in binaries.yaml"
            )
    return files


def _fresh_for(where: Path, files: list[Path]) -> str:
    """Start the environment `where` again when its requirements files changed since it
    was made: packages they no longer name must go (the sync that keeps them is
    inexact), or a stage could pass on what a fresh machine would not install. Returns
    the files' digest, recorded in the environment once it is made."""
    marker = where / ".shipyard-requirements"
    digest = hashlib.sha256()
    for file in files:
        digest.update(str(file).encode() + b"\0" + file.read_bytes())
    wanted = digest.hexdigest() if files else ""
    try:
        had = marker.read_text()
    except OSError:
        had = ""
    if had != wanted and where.exists():
        shutil.rmtree(where)
    return wanted


def _run(command: list[str], log: Path, env: Mapping[str, str], cwd: Path, what: str) -> None:
    with log.open("ab") as handle:
        handle.write(("$ " + " ".join(command) + "\n").encode())
    code = run_logged(command, log, env=env, cwd=cwd)
    if code != 0:
        raise ShipyardError(f"{what} failed (exit {code}); see {log}")


def _unlocked(
    action: Action, ctx: BuildContext, where: Path, python: str, env: dict[str, str], log: Path
) -> None:
    """No lock holds the project: its folder and its libraries' editable, groups resolved."""
    from shipyard.stages._select import libraries

    workspace = ctx.workspace
    assert workspace is not None and action.test is not None
    project = workspace.projects[action.project]
    folders = [project.root] + [
        workspace.projects[k].root for k in libraries(workspace, project.key)
    ]
    groups = action.test.groups
    # Each group from the pyproject.toml files that declare it: the project's, the root's.
    homes = tuple(dict.fromkeys((project.root, workspace.root)))
    group_files = [
        (folder / "pyproject.toml", group)
        for group in (groups if groups is not None else ("dev",))
        for folder in homes
        if _declares(folder, group)
    ]
    for group in groups or ():
        if not any(g == group for _, g in group_files):
            raise UsageError(
                f"the {action.stage} stage of {project.key} installs the dependency group "
                f"{group!r}, which neither {project.pyproject} nor the workspace root's "
                "pyproject.toml declares; declare it, or change the stage's groups"
            )
    digest = hashlib.sha256(python.encode())
    for folder in folders:
        digest.update(str(folder).encode() + b"\0" + (folder / "pyproject.toml").read_bytes())
    digest.update(repr(group_files).encode())
    files = _requirement_files(action, ctx.root)
    for file in files:
        digest.update(str(file).encode() + b"\0" + file.read_bytes())
    marker = where / _MARKER
    try:
        if marker.read_text() == digest.hexdigest() and (where / "bin" / "python").exists():
            return
    except OSError:
        pass
    uv = _uv()
    _run([uv, "venv", "--quiet", "--clear", "--python", python, str(where)], log, env, project.root,
         f"uv venv for {project.key}")  # fmt: skip
    command = [uv, "pip", "install", "--python", str(where / "bin" / "python")]
    for folder in folders:
        command += ["-e", str(folder)]
    for pyproject, group in group_files:
        command += ["--group", f"{pyproject}:{group}"]
    for file in files:
        command += ["-r", str(file)]
    # From the workspace root: a requirements file's relative paths are read from there.
    _run(command, log, env, workspace.root, f"installing {project.key} into its test environment")
    atomic_write(marker, digest.hexdigest().encode(), durable=False)
    os.utime(where)
