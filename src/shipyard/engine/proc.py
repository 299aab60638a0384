"""Subprocesses of a build: logged, never through a shell, and ended on interrupt."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["run_logged", "terminate_all"]

_lock = threading.Lock()
_running: set[subprocess.Popen[bytes]] = set()
_stopping = threading.Event()


def run_logged(
    command: Sequence[str], log: Path, *, env: Mapping[str, str], cwd: Path | None = None
) -> int:
    """Run `command` with stdout and stderr appended to `log`; return its exit code.

    The process is tracked so that an interrupted build can end it (see
    terminate_all); once stopping, no new process starts.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as handle:
        with _lock:
            if _stopping.is_set():
                return -2
            process = subprocess.Popen(
                list(command),
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env),
                cwd=cwd,
                # Its own process group, so terminate_all can end the tree it starts.
                process_group=0,
            )
            _running.add(process)
        try:
            return process.wait()
        finally:
            with _lock:
                _running.discard(process)


def terminate_all(grace: float = 5.0) -> None:
    """End every running build subprocess and everything it started.

    Each subprocess leads a process group of its own (`process_group=0`), and
    the backend and installer a front end starts inherit it, so the whole tree
    is ended by signalling the group: SIGTERM, then after `grace` seconds
    SIGKILL to whatever of the group is left. Process ids are never collected
    ahead of time: a pid read seconds earlier may belong to an unrelated
    process by the time it is signalled, but the kernel does not give a group's
    id to a new process while any member of the group (or its unreaped
    leader) still exists, so a group signal reaches only what the build started.
    """
    with _lock:
        _stopping.set()
        processes = list(_running)
    for process in processes:
        _signal_group(process, signal.SIGTERM)
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace)
        _signal_group(process, signal.SIGKILL)
        process.wait()


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    # ProcessLookupError: the group is empty (everything already ended).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def reset() -> None:
    """Allow processes again (after an interrupted build, in a long-lived process)."""
    _stopping.clear()
