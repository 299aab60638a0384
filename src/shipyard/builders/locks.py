"""Which locked requirements a binary installs: its own lock file, or its slice of uv.lock.

A binary with `requirements:` in binaries.yaml installs from that hash-pinned
file. Otherwise, when the repository has a uv.lock, it installs exactly its
package's locked third-party slice (exported by uv with hashes, dev groups left
out). Zipapps and images both ask here, so they install the same versions, and
their keys hash the same thing: the lock's bytes that concern the binary.
"""

from __future__ import annotations

from pathlib import Path

from shipyard._fs import sha256_file
from shipyard.engine.context import BuildContext
from shipyard.engine.keys import Value
from shipyard.engine.plan import Action
from shipyard.errors import UsageError

__all__ = ["lock_inputs", "requirements_for"]


def _file(action: Action, ctx: BuildContext) -> Path | None:
    lock = action.requirements
    if lock is None:
        return None
    return ctx.root / lock if not lock.is_absolute() else lock


def _uv_lock(action: Action, ctx: BuildContext) -> bool:
    workspace = ctx.workspace
    return bool(workspace and workspace.lock and action.project)


def lock_inputs(action: Action, ctx: BuildContext) -> Value:
    """What of a lock the action's key depends on: the lock file's bytes, or the
    sha256 of the binary's locked slice of uv.lock (so a uv.lock change that leaves
    the slice alone keeps the key), or None without a lock."""
    lock = _file(action, ctx)
    if lock is not None:
        return {"file": sha256_file(lock) if lock.is_file() else None}
    if _uv_lock(action, ctx):
        assert ctx.workspace is not None and ctx.workspace.lock is not None
        return {"uv.lock": ctx.workspace.lock.slice_digest(action.project, action.extras)}
    return None


def requirements_for(action: Action, ctx: BuildContext, folder: Path) -> Path | None:
    """The hash-pinned requirements file to install the action's binary from, written
    into `folder` when it comes from uv.lock; None to resolve from the index."""
    lock = _file(action, ctx)
    if lock is not None:
        return lock
    if not _uv_lock(action, ctx):
        return None
    from shipyard.builders.resolve import uv_binary
    from shipyard.workspace import export_requirements

    assert ctx.workspace is not None
    uv = uv_binary()
    if uv is None:
        raise UsageError(
            f"{ctx.workspace.root / 'uv.lock'}: installing from uv.lock needs uv; "
            "pip install uv (or put it on PATH)"
        )
    dest = folder / f"{action.project}.requirements.txt"
    return export_requirements(ctx.workspace, action.project, dest, uv=uv, extras=action.extras)
