"""PEP 517 build environments made once and reused: a project's wheel without a fresh venv.

A front end in isolated mode (`python -m build`, `uv build`) makes a new virtual
environment for every build and installs the backend into it: 1.5 s for a project of
one module, most of it creating the environment and compiling the backend's modules on
import. Here the environment is made once per key, in the shipyard cache folder
(`build-envs/<key>/`), by uv with bytecode compiled, and every later build with the same
key runs the backend's hooks in it, in one process (`RUNNER`).

The key is what decides what the environment holds: build-system.requires (as written,
normalised), the building Python (its path and version), where packages come from (the
installer's index settings, `INSTALLER_SETTINGS` less caches and time-outs) and this
module's format. A change of any of them gives a new environment, never a stale one;
an unpinned requirement stays at the version first installed for that key (the
environment records its versions, `PINS`, and the build log names them). A key's
environment is made under an exclusive lock and marked ready last, so concurrent builds
wait for one maker and never see half an environment; one left half made by a killed
build is made again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from shipyard._fs import atomic_write, exclusive
from shipyard.engine.cache.local import BUILD_ENVS
from shipyard.errors import BuildError
from shipyard.process import INSTALLER_SETTINGS, installer_env, run_logged

__all__ = [
    "PINS",
    "RUNNER",
    "BackendSpec",
    "backend_spec",
    "build_environment",
    "environment_key",
    "run_backend",
]

PINS = "shipyard-pins.json"  # written last: the environment is complete
_FORMAT = 1  # bump when what an environment holds or how it is made changes
# Settings that change how fast packages arrive, not which ones.
_NOT_KEYED = frozenset(
    {"UV_CACHE_DIR", "PIP_CACHE_DIR", "UV_HTTP_TIMEOUT", "PIP_TIMEOUT", "PIP_RETRIES"}
    | {"UV_CONCURRENT_DOWNLOADS"}
)
# PEP 517's defaults for a project without [build-system] (what `build` assumes).
_DEFAULT_REQUIRES = ("setuptools>=40.8.0",)
_DEFAULT_BACKEND = "setuptools.build_meta:__legacy__"

RUNNER = """\
import importlib, json, os, sys

source, spec, paths, out, result = sys.argv[1:6]
for path in reversed(json.loads(paths)):
    sys.path.insert(0, os.path.join(source, path))
module, _, attrs = spec.partition(":")
backend = importlib.import_module(module)
for attr in filter(None, attrs.split(".")):
    backend = getattr(backend, attr)
hook = getattr(backend, "get_requires_for_build_wheel", None)
missing = []
for text in (hook({}) if hook else []):
    try:
        import importlib.metadata as md
        from packaging.requirements import Requirement
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue
        if not req.specifier.contains(md.version(req.name), prereleases=True):
            missing.append(text)
    except Exception:
        missing.append(text)
if missing:
    outcome = {"missing": missing}
else:
    outcome = {"wheel": backend.build_wheel(out, {}, None)}
with open(result, "w", encoding="utf-8") as handle:
    json.dump(outcome, handle)
"""
"""The PEP 517 front end run by the environment's Python: import the backend (from
`backend-path` when given), ask for the wheel's extra requirements and, when the
environment has them all, build the wheel; the outcome goes to a JSON file."""


class BackendSpec:
    """A project's [build-system]: its requirements, backend and backend-path."""

    def __init__(self, requires: Sequence[str], backend: str, paths: Sequence[str]) -> None:
        self.requires = tuple(requires)
        self.backend = backend
        self.paths = tuple(paths)


def backend_spec(pyproject: Mapping[str, object]) -> BackendSpec:
    """The [build-system] of a parsed pyproject.toml, with PEP 517's defaults."""
    system = pyproject.get("build-system")
    system = system if isinstance(system, dict) else {}
    requires = system.get("requires", list(_DEFAULT_REQUIRES))
    backend = system.get("build-backend") or _DEFAULT_BACKEND
    paths = system.get("backend-path", [])
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise ValueError("[build-system].requires is not a list of strings")
    if not isinstance(backend, str) or not isinstance(paths, list):
        raise ValueError("[build-system].build-backend or backend-path is malformed")
    return BackendSpec(requires, backend, [str(p) for p in paths])


def _normalised(requires: Sequence[str]) -> list[str]:
    """Each requirement in one spelling (name case, spaces), sorted and unique."""
    out = set()
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            out.add(text.strip())
            continue
        req.name = canonicalize_name(req.name)
        out.add(str(req))
    return sorted(out)


def environment_key(requires: Sequence[str], env: Mapping[str, str]) -> str:
    """The sha256 naming the environment of `requires` for this Python and the index
    settings in `env` (see the module's docstring)."""
    settings = {
        name: value
        for name, value in sorted(installer_env(env).items())
        if name in INSTALLER_SETTINGS and name not in _NOT_KEYED
    }
    data = {
        "format": _FORMAT,
        "requires": _normalised(requires),
        "python": [os.path.realpath(sys.executable), sys.version],
        "index": settings,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _python(home: Path) -> Path:
    return home / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def build_environment(
    requires: Sequence[str],
    cache: Path,
    *,
    uv: str,
    env: Mapping[str, str],
    log: Path,
    action: str,
) -> Path:
    """The folder of the environment holding `requires`, made now when no build made it
    before; BuildError when the installer fails."""
    key = environment_key(requires, env)
    home = cache / BUILD_ENVS / key[:40]
    if (home / PINS).is_file():
        _note(log, f"build environment {home} (reused)\n")
        return home
    with exclusive(cache / BUILD_ENVS / f"{key[:40]}.lock"):
        if (home / PINS).is_file():  # made while this build waited
            _note(log, f"build environment {home} (made by another build)\n")
            return home
        shutil.rmtree(home, ignore_errors=True)  # a killed build's half environment
        quiet = installer_env(env)
        wanted = home / "requires.txt"
        for command in (
            [uv, "venv", "--quiet", "--no-config", "--python", sys.executable, str(home)],
            [
                *(uv, "pip", "install", "--no-progress", "--compile-bytecode"),
                *("--python", str(_python(home)), "-r", str(wanted)),
            ],
        ):
            if command[1] == "pip":
                wanted.write_text("".join(f"{r}\n" for r in requires), encoding="utf-8")
            _note(log, f"$ {' '.join(command)}\n")
            if run_logged(command, log, env=quiet, cwd=cache) != 0:
                raise BuildError(
                    action,
                    f"installing the build backend's requirements ({', '.join(requires)}) failed",
                    command=command,
                    log=log,
                )
        pins = _installed(home)
        atomic_write(home / PINS, json.dumps(pins, indent=2, sort_keys=True).encode() + b"\n")
    _note(log, f"build environment {home}: {' '.join(f'{k}=={v}' for k, v in pins.items())}\n")
    return home


def _installed(home: Path) -> dict[str, str]:
    """name -> version of what the environment `home` holds (its dist-info folders)."""
    found: dict[str, str] = {}
    for meta in sorted(home.glob("lib*/python*/site-packages/*.dist-info/METADATA")) + sorted(
        home.glob("Lib/site-packages/*.dist-info/METADATA")
    ):
        head = meta.read_text(encoding="utf-8", errors="replace").split("\n\n", 1)[0]
        fields = dict(
            (k.strip().lower(), v.strip())
            for k, _, v in (line.partition(":") for line in head.splitlines())
        )
        if "name" in fields:
            found[fields["name"]] = fields.get("version", "?")
    return found


def _note(log: Path, text: str) -> None:
    with log.open("a", encoding="utf-8") as handle:
        handle.write(text)


def run_backend(
    spec: BackendSpec,
    source: Path,
    out: Path,
    cache: Path,
    *,
    uv: str,
    env: Mapping[str, str],
    build_env: Mapping[str, str],
    log: Path,
    action: str,
) -> tuple[Path | None, list[str], int]:
    """Build the wheel of the project in `source` into `out` with its backend, in the
    reused environment of its requirements (and of the wheel's extra requirements the
    backend asks for, when the first has not got them).

    `env` is the build's environment (for the installer's settings), `build_env` the
    backend's. The wheel (None when the backend made none), the command and its exit
    status; BuildError when an environment cannot be made."""
    requires = list(spec.requires)
    while True:
        home = build_environment(requires, cache, uv=uv, env=env, log=log, action=action)
        runner = home / "shipyard_pep517.py"
        if not runner.is_file():
            atomic_write(runner, RUNNER.encode(), durable=False)
        result = out.parent / "pep517.json"
        result.unlink(missing_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        paths = json.dumps(list(spec.paths))
        command = [str(_python(home)), str(runner), str(source), spec.backend, paths]
        command += [str(out), str(result)]
        scripts = str(_python(home).parent)
        backend_env = {**build_env, "PATH": scripts + os.pathsep + build_env.get("PATH", "")}
        _note(log, f"$ {' '.join(command)}\n")
        returncode = run_logged(command, log, env=backend_env, cwd=source)
        outcome = _outcome(result) if returncode == 0 else {}
        missing = outcome.get("missing")
        if isinstance(missing, list) and missing and len(requires) == len(spec.requires):
            requires += [str(m) for m in missing]  # once: then they must be there
            continue
        wheel = outcome.get("wheel")
        built = out / wheel if isinstance(wheel, str) and (out / wheel).is_file() else None
        if isinstance(missing, list) and missing:
            _note(log, f"the backend still asks for {', '.join(str(m) for m in missing)}\n")
        return built, command, returncode if returncode or built else 1


def _outcome(result: Path) -> dict[str, object]:
    try:
        data = json.loads(result.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
