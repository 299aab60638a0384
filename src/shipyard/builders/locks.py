"""Which locked requirements a binary installs: its own lock file, or its slice of uv.lock.

A binary with `requirements:` in binaries.yaml installs from that hash-pinned
file. Otherwise, when the repository has a uv.lock, it installs exactly its
package's locked third-party slice (exported by uv with hashes, dev groups left
out). Zipapps and images both ask here, so they install the same versions, and
their keys hash the same thing: the lock's bytes that concern the binary.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from shipyard._fs import sha256_file
from shipyard.engine.context import BuildContext
from shipyard.engine.keys import Value
from shipyard.engine.plan import Action
from shipyard.errors import UsageError

if TYPE_CHECKING:
    from shipyard.builders.resolve import Locked

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


def requirements_for(action: Action, ctx: BuildContext, folder: Path) -> Locked | None:
    """The hash-pinned requirements to install the action's binary from, written into
    `folder` when they come from uv.lock; None to resolve from the index.

    uv.lock's slice is complete, so it is installed exactly (no second resolution);
    its packages published only as an sdist are built into wheels once (cached by the
    sdist's hash) and installed from those."""
    from shipyard.builders.resolve import Locked

    lock = _file(action, ctx)
    if lock is not None:
        return Locked(lock)
    if not _uv_lock(action, ctx):
        return None
    from shipyard.builders.sdists import sdist_only, wheel_from_sdist, without
    from shipyard.builders.wheel import build_env
    from shipyard.engine.cache.local import default_cache_dir
    from shipyard.process import uv_binary
    from shipyard.workspace import export_requirements

    assert ctx.workspace is not None
    uv = uv_binary()
    if uv is None:
        raise UsageError(
            f"{ctx.workspace.root / 'uv.lock'}: installing from uv.lock needs uv; "
            "pip install uv (or put it on PATH)"
        )
    dest = folder / f"{action.project}.requirements.txt"
    export_requirements(ctx.workspace, action.project, dest, uv=uv, extras=action.extras)
    assert ctx.workspace.lock is not None
    sdists = sdist_only(dest, ctx.workspace.lock.packages)
    if not sdists:
        return Locked(dest, exact=True)
    cache = default_cache_dir(None, ctx.env)
    log = ctx.logs / f"sdists-{action.id.replace(':', '-')}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    built = tuple(
        wheel_from_sdist(
            sdist,
            lock_dir=ctx.workspace.lock.path.parent,
            cache=cache,
            uv=uv,
            env=build_env(ctx),
            log=log,
        )
        for sdist in sdists
    )
    without(dest, [s.name for s in sdists])
    return Locked(dest, exact=True, built=built)
