"""Subprocesses of a build: logged, never through a shell, and ended on interrupt."""

from __future__ import annotations

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
    """End every running build subprocess (SIGTERM, then SIGKILL after `grace` seconds)."""
    with _lock:
        _stopping.set()
        processes = list(_running)
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()


def reset() -> None:
    """Allow processes again (after an interrupted build, in a long-lived process)."""
    _stopping.clear()
