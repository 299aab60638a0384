"""The environment a stage runs in: made from the lock, one per project and groups.

With uv.lock (the project a member of it), `uv sync --frozen --package P` into
`<workspace>/.shipyard/envs/<project>[+groups]`: the project and its in-repo
libraries editable, its locked third-party slice and its dependency groups (uv's
default groups, `dev`, unless the stage names others), exactly as locked; warm, uv
does this in milliseconds. Without a lock, a virtual environment with the project
and its libraries installed editable and their groups resolved by uv, redone only
when a pyproject.toml it was made from changes. Never shipyard's own environment.
"""

from __future__ import annotations

import hashlib
import os
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
            for group in action.test.groups or ():
                command += ["--group", group]
            files = _requirement_files(action)
            if files:  # installed over the lock's packages below: keep them on the next sync
                command.append("--inexact")
            env["UV_PROJECT_ENVIRONMENT"] = str(where)
            _run(command, log, env, workspace.root, f"uv sync of {action.project}")
            if files:
                pip = [_uv(), "pip", "install", "--python", str(where / "bin" / "python")]
                for file in files:
                    pip += ["-r", str(file)]
                _run(pip, log, env, workspace.root, f"installing {action.project}'s requirements")
        else:
            _unlocked(action, ctx, where, python, env, log)
    return where


def _requirement_files(action: Action) -> list[Path]:
    """The stage's requirements files, each checked to exist."""
    assert action.test is not None
    files = [action.source / name for name in action.test.requirements or ()]
    for file in files:
        if not file.is_file():
            raise UsageError(
                f"{file}: no such requirements file for the {action.stage} stage of "
                f"{action.project}; add it, or set tests.projects.{action.project}."
                f"{action.stage}.requirements in binaries.yaml"
            )
    return files


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
    if groups is None:
        from shipyard.stages._settings import _pyproject, _tool

        groups = ("dev",) if _tool(_pyproject(project.root), "dependency-groups", "dev") else ()
    digest = hashlib.sha256(python.encode())
    for folder in folders:
        digest.update(str(folder).encode() + b"\0" + (folder / "pyproject.toml").read_bytes())
    digest.update("\0".join(groups).encode())
    files = _requirement_files(action)
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
    for group in groups:
        command += ["--group", f"{project.pyproject}:{group}"]
    for file in files:
        command += ["-r", str(file)]
    # From the workspace root: a requirements file's relative paths are read from there.
    _run(command, log, env, workspace.root, f"installing {project.key} into its test environment")
    atomic_write(marker, digest.hexdigest().encode(), durable=False)
    os.utime(where)
