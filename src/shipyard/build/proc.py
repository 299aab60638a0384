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
            )
            _running.add(process)
        try:
            return process.wait()
        finally:
            with _lock:
                _running.discard(process)


def terminate_all(grace: float = 5.0) -> None:
    """End every running build subprocess and everything it started.

    The backend and installer a front end starts would outlive it and keep
    writing temporaries, so the whole tree is ended (found through /proc).
    """
    with _lock:
        _stopping.set()
        processes = list(_running)
    trees = {process.pid: _descendants(process.pid) for process in processes}
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for pid in trees[process.pid]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def reset() -> None:
    """Allow processes again (after an interrupted build, in a long-lived process)."""
    _stopping.clear()
