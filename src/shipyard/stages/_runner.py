"""The builder of test stages: a stage's key, its environment, its services, its run.

A stage is an action of kind "test" (see `shipyard.engine`): its key covers its
project's files, its in-repo libraries' files (and those its groups name), the tool
settings in the folders above it, its locked slice and groups in uv.lock (or, with
no lock, the project files that declare them), its command, environment, groups and
services, the arguments given after `--`, the Python and the platform. A passing
stage's only output is its JUnit file (`dist/tests/<project>/<stage>.xml`), which
the cache stores; a failing stage raises, so it is never cached.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from shipyard._environ import PROJECT, STAGE
from shipyard._fs import atomic_write
from shipyard.artifacts import ANY, Artifact
from shipyard.dist import action_log, logs_dir, stage_result
from shipyard.engine.context import BuildContext
from shipyard.engine.keys import ActionKey, Inputs, Value
from shipyard.engine.plan import Action
from shipyard.errors import BuildError, ShipyardError
from shipyard.files.sources import tree_hash
from shipyard.manifest import Service, Stage
from shipyard.process import StepTimeout, run_logged, start_logged, stop, without_secrets
from shipyard.stages import _junit
from shipyard.stages._select import SHARED_CONFIG, libraries, root_projects

__all__ = ["StageRunner", "service_variable"]

_TAIL = 60  # lines of a failed stage's log in its JUnit failure and its message
# What a stage's command must not inherit: another environment's, or Python's search path.
_DROPPED = ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "CONDA_PREFIX", "UV_PROJECT_ENVIRONMENT")
_PYTEST_NO_TESTS = 5  # pytest's exit code when it collected nothing


def service_variable(name: str) -> str:
    """The environment variable holding service `name`'s port: DISCOVERY_PORT."""
    return name.upper().replace("-", "_").replace(".", "_") + "_PORT"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _shared_config(action: Action, ctx: BuildContext) -> dict[str, str]:
    """The tool settings files in the folders above the project, up to the workspace
    root, by relative path: sha256 of each."""
    workspace = ctx.workspace
    assert workspace is not None
    found: dict[str, str] = {}
    folder = action.source
    while folder != workspace.root and folder.is_relative_to(workspace.root):
        folder = folder.parent
        for name in SHARED_CONFIG:
            path = folder / name
            if path.is_file():
                found[path.relative_to(workspace.root).as_posix()] = _sha256(path)
    return found


def _requirements(action: Action) -> dict[str, str | None]:
    """The stage's requirements files by name, each its sha256 (None: missing)."""
    assert action.test is not None
    found: dict[str, str | None] = {}
    for name in action.test.requirements or ():
        path = action.source / name
        found[name] = _sha256(path) if path.is_file() else None
    return found


def _settings(stage: Stage) -> dict[str, Value]:
    return {
        "command": stage.command,
        "groups": None if stage.groups is None else list(stage.groups),
        "env": dict(stage.env or {}),
        "services": [
            {"name": s.name, "start": s.start, "ready": s.ready, "env": dict(s.env)}
            for s in stage.services or ()
        ],
    }


class StageRunner:
    """Runs test stages (actions of kind "test"); `args` go to every stage's command."""

    kind = "test"

    def __init__(self, args: tuple[str, ...] = ()) -> None:
        self.args = args

    def inputs(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Inputs:
        """Everything the stage's outcome depends on (see the module's docstring)."""
        workspace = ctx.workspace
        assert workspace is not None and action.test is not None
        key = action.project

        def files(folder: Path, nested: tuple[Path, ...]) -> str:
            return tree_hash(folder, exclude=nested, root=ctx.root, git=ctx.git, memo=ctx.digests)

        libs = {}
        for name in libraries(workspace, key):
            lib = workspace.projects[name]
            inside = tuple(
                p.root
                for p in workspace.projects.values()
                if p.root != lib.root and p.root.is_relative_to(lib.root)
            )
            libs[name] = files(lib.root, inside)
        lock: Value = None
        if workspace.lock is not None and key in workspace.lock.members:
            lock = {
                "slice": workspace.lock.slice_digest(key, workspace.projects[key].extras),
                "groups": workspace.lock.groups(key, root_projects(workspace))[0],
            }
        return {
            "stage": action.stage,
            "project": key,
            "files": files(action.source, action.nested),
            "libraries": libs,
            "config": _shared_config(action, ctx),
            "lock": lock,
            "settings": _settings(action.test),
            "requirements": _requirements(action),
            "args": list(self.args),
            "python": action.pythons[0] if action.pythons else ctx.python,
            "platform": f"{sys.platform}-{platform.machine()}",
        }

    def restored_ok(
        self, action: Action, ctx: BuildContext, restored: tuple[Artifact, ...]
    ) -> bool:
        """A cache entry of a stage counts only as one passed stage's JUnit file of the
        shape pytest writes (`_junit.passed_result`); anything else is run again."""
        return len(restored) == 1 and _junit.passed_result(
            restored[0].path, action.project, action.stage
        )

    def build(
        self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], key: ActionKey
    ) -> tuple[Artifact, ...]:
        """Make the environment, start the services, run the command; the JUnit file of a
        pass, else BuildError naming the failed tests and the log."""
        from shipyard.stages._env import environment

        stage = action.test
        assert stage is not None and ctx.workspace is not None
        log = action_log(ctx.dist, "test", action.names)
        result = stage_result(ctx.dist, action.project, action.stage)
        result.unlink(missing_ok=True)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.unlink(missing_ok=True)
        start = time.monotonic()
        junit = logs_dir(ctx.dist) / f".{action.project}.{action.stage}.junit.xml"
        junit.unlink(missing_ok=True)
        try:
            where = environment(action, ctx, log)
            env = self._env(action, ctx, where, junit)
            command = self._command(stage, where, env)
            with _services(action, ctx, env) as ports:
                env.update(ports)
                with log.open("ab") as handle:
                    handle.write(("$ " + shlex.join(command) + "\n").encode())
                code = run_logged(command, log, env=env, cwd=action.source, timeout=stage.timeout)
        except StepTimeout as exc:
            self._write(action, ctx, junit, False, time.monotonic() - start, log)
            raise BuildError(
                action.id, f"{action.stage} of {action.project} {exc}", log=log
            ) from None
        except ShipyardError as exc:
            self._write(action, ctx, junit, False, time.monotonic() - start, log)
            raise BuildError(action.id, str(exc), log=log) from exc
        if code == _PYTEST_NO_TESTS and _is_pytest(command):
            counts = _junit.counts(junit)
            if counts is None or counts.tests == 0:
                code = 0  # nothing selected (say, no integration tests): nothing failed
        passed = code == 0
        from_pytest = junit.is_file()
        self._write(action, ctx, junit, passed, time.monotonic() - start, log)
        junit.unlink(missing_ok=True)
        if not passed:
            failed = _junit.failed_cases(result) if from_pytest else []
            named = f": {', '.join(failed)}" if failed else ""
            raise BuildError(
                action.id,
                f"{action.stage} of {action.project} failed (exit {code}){named}"
                + _missing_module(log),
                log=log,
            )
        return (
            Artifact("test", action.project, ANY, result, _sha256(result), result.stat().st_size),
        )

    def _write(
        self,
        action: Action,
        ctx: BuildContext,
        junit: Path,
        passed: bool,
        seconds: float,
        log: Path,
    ) -> None:
        data = _junit.stage_xml(
            action.project,
            action.stage,
            passed=passed,
            duration=seconds,
            pytest_xml=junit if junit.is_file() else None,
            log_tail=_tail(log),
        )
        atomic_write(stage_result(ctx.dist, action.project, action.stage), data, durable=False)

    def _env(self, action: Action, ctx: BuildContext, where: Path, junit: Path) -> dict[str, str]:
        stage = action.test
        assert stage is not None
        env = {k: v for k, v in without_secrets(ctx.env).items() if k not in _DROPPED}
        env["VIRTUAL_ENV"] = str(where)
        env["PATH"] = str(where / "bin") + os.pathsep + env.get("PATH", os.defpath)
        env[PROJECT.name] = action.project
        env[STAGE.name] = action.stage
        env.update(stage.env or {})
        # pytest splits PYTEST_ADDOPTS as a shell does: a path with a space is quoted.
        extra = f"--junitxml={shlex.quote(str(junit))} -o junit_family=xunit2"
        env["PYTEST_ADDOPTS"] = (env.get("PYTEST_ADDOPTS", "") + " " + extra).strip()
        return env

    def _command(self, stage: Stage, where: Path, env: Mapping[str, str]) -> list[str]:
        words = [*shlex.split(stage.command or ""), *self.args]
        found = shutil.which(words[0], path=env["PATH"]) if "/" not in words[0] else words[0]
        if found is None:
            raise ShipyardError(
                f"{words[0]}: not found in the stage's environment ({where}) or on PATH; "
                "add it to a dependency group the stage installs (tests.stages.<stage>.groups)"
            )
        return [found, *words[1:]]


_NO_MODULE = re.compile(r"No module named '?([A-Za-z0-9_.]+)'?")


def _missing_module(log: Path) -> str:
    """A hint when the stage's tool is not in its environment ('No module named pytest')."""
    found = _NO_MODULE.search(_tail(log))
    if found is None:
        return ""
    return (
        f"; {found.group(1)} is not installed in the stage's environment: add it to a "
        "dependency group and name it (tests.stages.<stage>.groups), or to the project's "
        "or the workspace root's dev group"
    )


def _is_pytest(command: list[str]) -> bool:
    name = Path(command[0]).name
    return name in ("pytest", "py.test") or (
        name.startswith("python") and command[1:3] == ["-m", "pytest"]
    )


def _tail(log: Path) -> str:
    try:
        with log.open("rb") as handle:
            handle.seek(max(0, log.stat().st_size - 64 * 1024))
            lines = handle.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-_TAIL:])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _services(
    action: Action, ctx: BuildContext, env: Mapping[str, str]
) -> Iterator[dict[str, str]]:
    """Start the stage's services, each on a free loopback port, and wait until each is
    ready; yield their port variables; stop them all afterwards."""
    stage = action.test
    assert stage is not None
    ports = {s.name: _free_port() for s in stage.services or ()}
    variables = {service_variable(name): str(port) for name, port in ports.items()}
    running: list[subprocess.Popen[bytes]] = []
    try:
        for service in stage.services or ():
            port = ports[service.name]
            own = {**env, **variables, **service.env}
            log = logs_dir(ctx.dist) / f"test-{action.project}.{action.stage}.{service.name}.log"
            log.unlink(missing_ok=True)
            words = shlex.split(service.start.replace("{port}", str(port)))
            program = shutil.which(words[0], path=own["PATH"]) or words[0]
            process = start_logged([program, *words[1:]], log, env=own, cwd=action.source)
            if process is None:
                raise ShipyardError("interrupted")
            running.append(process)
            _wait_ready(service, port, process, own, action, log)
        yield variables
    finally:
        for process in reversed(running):
            stop(process)


def _wait_ready(
    service: Service,
    port: int,
    process: subprocess.Popen[bytes],
    env: Mapping[str, str],
    action: Action,
    log: Path,
) -> None:
    deadline = time.monotonic() + service.timeout
    check = shlex.split(service.ready.replace("{port}", str(port))) if service.ready else None
    while True:
        if process.poll() is not None:
            raise ShipyardError(
                f"service {service.name} of {action.id} exited ({process.returncode}) before "
                f"it was ready; see {log}:\n{_tail(log)}"
            )
        if check is None:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                return
        else:
            program = shutil.which(check[0], path=env["PATH"]) or check[0]
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                done = subprocess.run(
                    [program, *check[1:]],
                    env=dict(env),
                    cwd=action.source,
                    capture_output=True,
                    timeout=10,
                    check=False,
                )
                if done.returncode == 0:
                    return
        if time.monotonic() > deadline:
            raise ShipyardError(
                f"service {service.name} of {action.id} was not ready after "
                f"{service.timeout:g}s (port {port}); see {log}"
            )
        time.sleep(0.1)
