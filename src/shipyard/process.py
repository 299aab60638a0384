"""Subprocesses of a build: logged, never through a shell, without shipyard's secrets in
their environment, and ended on interrupt."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from shipyard._environ import SIGNING_KEY

__all__ = [
    "INSTALLER_SETTINGS",
    "StepTimeout",
    "installer_env",
    "is_secret",
    "run_logged",
    "start_logged",
    "stop",
    "terminate_all",
    "uv_binary",
    "without_secrets",
]

# A build subprocess (a PEP 517 backend, an installer, the plugins they load, a smoke run)
# is code from the repository or an index; none of it needs shipyard's credentials, and
# what it can read it can send anywhere. Secret: the signing key variables, and any
# SHIPYARD_* name that ends as a credential's does (registry and index users, passwords
# and tokens, per host or global), or whose value is a URL carrying user:password@.
_SIGNING = SIGNING_KEY.name
_CREDENTIAL_ENDINGS = (
    "_PASSWORD",
    "_PASSWD",
    "_TOKEN",
    "_KEY",
    "_SECRET",
    "_USER",
    "_USERNAME",
    "_CREDENTIALS",
    "_AUTH",
)
_URL_WITH_USER = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s]*@")

_lock = threading.Lock()
_running: set[subprocess.Popen[bytes]] = set()
_stopping = threading.Event()


def is_secret(name: str, value: str = "") -> bool:
    """Whether the environment variable `name` (holding `value`) is one of shipyard's
    secrets, which no build subprocess may see. Names compare in upper case, as Windows
    reads them."""
    upper = name.upper()
    if not upper.startswith("SHIPYARD_"):
        return False
    return (
        upper.startswith(_SIGNING)
        or upper.endswith(_CREDENTIAL_ENDINGS)
        or _URL_WITH_USER.match(value.strip()) is not None
    )


def without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without shipyard's secrets (`is_secret`): the environment a build subprocess
    starts from. The build's own settings (SHIPYARD_VERSION, the cache folder, time-outs)
    and everything not shipyard's (PATH, an installer's index settings) are kept."""
    return {name: value for name, value in env.items() if not is_secret(name, value)}


# What of the environment uv and pip may read, on purpose: where packages come from, how
# to reach and trust it, and where to cache them. Everything else of theirs (constraints,
# overrides, `--no-binary`, the Python to use, a config file) would change what a build
# installs behind the lock's back, so it is dropped, and neither reads a configuration
# file: not the working directory's pyproject.toml or uv.toml (a repository's own
# `[tool.uv]` constraints and overrides are already in its uv.lock), not the user's.
INSTALLER_SETTINGS = frozenset(
    {
        "UV_INDEX",
        "UV_DEFAULT_INDEX",
        "UV_INDEX_URL",
        "UV_EXTRA_INDEX_URL",
        "UV_FIND_LINKS",
        "UV_INDEX_STRATEGY",
        "UV_KEYRING_PROVIDER",
        "UV_NATIVE_TLS",
        "UV_INSECURE_HOST",
        "UV_HTTP_TIMEOUT",
        "UV_CONCURRENT_DOWNLOADS",
        "UV_CACHE_DIR",
        "UV_OFFLINE",
        "UV_PYTHON_DOWNLOADS",
        "PIP_INDEX_URL",
        "PIP_EXTRA_INDEX_URL",
        "PIP_FIND_LINKS",
        "PIP_NO_INDEX",
        "PIP_TRUSTED_HOST",
        "PIP_CERT",
        "PIP_CLIENT_CERT",
        "PIP_CACHE_DIR",
        "PIP_TIMEOUT",
        "PIP_RETRIES",
        "PIP_PROXY",
    }
)
# Per-index credentials uv reads for a named index: UV_INDEX_<NAME>_USERNAME/_PASSWORD.
_UV_INDEX_CREDENTIAL = re.compile(r"^UV_INDEX_[A-Z0-9_]+_(USERNAME|PASSWORD)$")


def installer_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` as uv and pip may see it: without shipyard's secrets, with only the
    `INSTALLER_SETTINGS` of their own variables (and uv's per-index credentials), and
    with their configuration files switched off (UV_NO_CONFIG, PIP_CONFIG_FILE)."""
    kept = {
        name: value
        for name, value in without_secrets(env).items()
        if not name.upper().startswith(("UV_", "PIP_"))
        or name.upper() in INSTALLER_SETTINGS
        or _UV_INDEX_CREDENTIAL.match(name.upper())
    }
    kept["UV_NO_CONFIG"] = "1"
    kept["PIP_CONFIG_FILE"] = os.devnull
    return kept


class StepTimeout(Exception):
    """A step ran longer than it may: it and everything it started were ended."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"ran longer than {seconds:g}s and was stopped")
        self.seconds = seconds


_UV_LOCK = threading.Lock()


@functools.cache
def _find_uv() -> str | None:
    try:
        from uv import find_uv_bin
    except ImportError:
        return shutil.which("uv")
    return find_uv_bin()


def uv_binary() -> str | None:
    """The uv executable (the `uv` package's, else on PATH), or None."""
    # Once, under a lock: find_uv_bin reads sysconfig, whose first use is not
    # thread-safe (a racing thread sees its variables half filled in).
    with _UV_LOCK:
        return _find_uv()


def run_logged(
    command: Sequence[str],
    log: Path,
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    timeout: float | None = None,
) -> int:
    """Run `command` with stdout and stderr appended to `log`; return its exit code.

    The process is tracked so that an interrupted build can end it (see
    terminate_all); once stopping, no new process starts. After `timeout`
    seconds the step and every process it started are ended and StepTimeout is
    raised.
    """
    process = start_logged(command, log, env=env, cwd=cwd)
    if process is None:
        return -2
    try:
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            stop(process)
            raise StepTimeout(timeout or 0.0) from None
    finally:
        with _lock:
            _running.discard(process)


def start_logged(
    command: Sequence[str], log: Path, *, env: Mapping[str, str], cwd: Path | None = None
) -> subprocess.Popen[bytes] | None:
    """Start `command` with its output appended to `log`, tracked as `run_logged`'s
    steps are (an interrupt ends it); None once the build is stopping. End it with
    `stop`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as handle, _lock:
        if _stopping.is_set():
            return None
        process = subprocess.Popen(
            list(command),
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env),
            cwd=cwd,
        )
        _running.add(process)
    return process


def stop(process: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """End `process` and every process it started (as `terminate_all` does), and stop
    tracking it."""
    tree = _hold(_descendants(process.pid))
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    for fd in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        os.close(fd)
    with _lock:
        _running.discard(process)


def terminate_all(grace: float = 5.0) -> None:
    """End every running build subprocess and everything it started.

    The backend and installer a front end starts would outlive it and keep
    writing temporaries, so the whole tree is ended: SIGTERM to each step, then
    after `grace` seconds SIGKILL to the step and to the processes it had
    started when the interrupt came. Those are held by pidfd, never by process
    id: a pid read seconds earlier may by then belong to an unrelated process,
    and a pidfd names one process for good (its start time is checked after
    opening it, so a pid reused between the /proc walk and the open is not
    taken). The steps stay in shipyard's own process group, so a SIGKILL of
    that group (a cancelled CI job) still takes them with it.
    """
    with _lock:
        _stopping.set()
        processes = list(_running)
    trees = {process.pid: _hold(_descendants(process.pid)) for process in processes}
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for fd in trees[process.pid]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            os.close(fd)


def _stat(pid: int | str) -> tuple[int, int]:
    """(parent pid, start time in clock ticks) of `pid`, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[19])


def _descendants(root: int) -> list[tuple[int, int]]:
    """Every process below `root`, each as (pid, start time)."""
    children: dict[int, list[tuple[int, int]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parent, started = _stat(stat.parent.name)
            children.setdefault(parent, []).append((int(stat.parent.name), started))
    found: list[tuple[int, int]] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child[0])
    return found


def _hold(processes: list[tuple[int, int]]) -> list[int]:
    """A pidfd for each (pid, start time) that is still that same process."""
    held: list[int] = []
    for pid, started in processes:
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # gone already, or no pidfds here: never fall back to the pid
            continue
        try:
            same = _stat(pid)[1] == started
        except (OSError, ValueError, IndexError):
            same = False
        if same:
            held.append(fd)
        else:
            os.close(fd)
    return held


def reset() -> None:
    """Allow processes again (after an interrupted build, in a long-lived process)."""
    _stopping.clear()
