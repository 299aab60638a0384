"""Test stages: lint, typecheck, unit, integration; `test` runs all four in order."""

from __future__ import annotations

import os
import shlex
import tempfile
from pathlib import Path

import nox

from shipyard.nox import stages

nox.options.sessions = ["test"]
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.error_on_missing_interpreters = True

PYTHON = "3.11"
# What the integration stage needs from the caller's environment (set by
# scripts/services.sh or CI); nox passes the environment through, this documents it.
SERVICE_VARS = (
    "SHIPYARD_REQUIRE_SERVICES",
    "SHIPYARD_REGISTRY",
    "SHIPYARD_BASE_IMAGE",
    "SHIPYARD_BASE_LAYOUT",
    "DOCKER_HOST",
    "SHIPYARD_BUILDGRID",
    "SHIPYARD_NGINX",
)


def _install(session: nox.Session) -> None:
    session.install("-e", ".[test,remote]")


def _lint(session: nox.Session) -> None:
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


def _typecheck(session: nox.Session) -> None:
    session.run("mypy")


def _unit(session: nox.Session) -> None:
    session.run("pytest", "-m", "not integration", *session.posargs)


def _integration(session: nox.Session) -> None:
    present = [name for name in SERVICE_VARS if os.environ.get(name)]
    session.log("service settings from the environment: " + (", ".join(present) or "none"))
    session.run("pytest", "-m", "integration", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.install("ruff")
    _lint(session)


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict over src, tests, tasks and benchmarks."""
    _install(session)
    _typecheck(session)


@nox.session(python=PYTHON)
def unit(session: nox.Session) -> None:
    """Tests that need no services."""
    _install(session)
    _unit(session)


@nox.session(python=PYTHON)
def integration(session: nox.Session) -> None:
    """Tests against the real Docker engine, registry and QEMU (scripts/services.sh)."""
    _install(session)
    _integration(session)


@nox.session(python=PYTHON)
def test(session: nox.Session) -> None:
    """All four stages in order in one environment; the first failure fails the session."""
    _install(session)
    for name, stage in (
        ("lint", _lint),
        ("typecheck", _typecheck),
        ("unit", _unit),
        ("integration", _integration),
    ):
        session.log(f"stage: {name}")
        stage(session)


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks under benchmarks/ (not part of test). Each one's output is kept in
    dist/bench/<script>.txt and put into docs/performance.md between its markers
    (benchmarks/_tables.py), so the published figures are this run's."""
    _install(session)
    tables = Path("dist/bench")
    tables.mkdir(parents=True, exist_ok=True)
    for script in sorted(os.listdir("benchmarks")):
        if script.endswith(".py") and not script.startswith("_"):
            command = shlex.join(["python", f"benchmarks/{script}", *session.posargs])
            kept = shlex.quote(str(tables / f"{script[:-3]}.txt"))
            # Shown as it runs and kept: a benchmark takes minutes.
            session.run("bash", "-o", "pipefail", "-c", f"{command} | tee {kept}", external=True)
    session.run("python", "benchmarks/_tables.py", str(tables), "docs/performance.md")


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """The documentation site into dist/site: the reference pages generated from the code
    (docs/_hooks.py), then `mkdocs build --strict`, which fails on a broken link."""
    session.install("-e", ".[docs]")
    session.run(
        "mkdocs", "build", "--strict", "--site-dir", "dist/site", env={"NO_MKDOCS_2_WARNING": "1"}
    )
    pages = sorted(str(p.relative_to("dist/site")) for p in Path("dist/site").rglob("index.html"))
    session.log(f"{len(pages)} pages: " + ", ".join(pages))


@nox.session(python=PYTHON)
def fuzz(session: nox.Session) -> None:
    """Property-based manifest fuzzing: at least 10,000 generated manifests (hypothesis)."""
    _install(session)
    session.run(
        "pytest",
        "tests/fuzz",
        "-p",
        "no:cacheprovider",
        *session.posargs,
        env={"SHIPYARD_FUZZ_EXAMPLES": os.environ.get("SHIPYARD_FUZZ_EXAMPLES", "10000")},
    )


@nox.session(python=PYTHON)
def reliability(session: nox.Session) -> None:
    """Every reliability test (faults, fuzz, hostile input, crashes) -> docs/reliability.md."""
    _install(session)
    # Not session.create_tmp(): it points TMPDIR inside this checkout, so every
    # test's scratch repository would sit inside our git work tree and take it
    # as its repository root. An absolute path: tests change directory.
    log = os.path.join(tempfile.mkdtemp(prefix="shipyard-reliability-"), "reliability.jsonl")
    env = {
        "SHIPYARD_RELIABILITY_LOG": log,
        "SHIPYARD_FUZZ_EXAMPLES": os.environ.get("SHIPYARD_FUZZ_EXAMPLES", "10000"),
        # Fault seeds for the push and the release through the fault proxy.
        "SHIPYARD_FAULT_SEEDS": os.environ.get("SHIPYARD_FAULT_SEEDS", "50"),
    }
    session.run("pytest", "-m", "reliability", "tests", *session.posargs, env=env)
    session.run("python", "scripts/reliability_report.py", log, "docs/reliability.md")


# The example suite's own test stages through `shipyard test` (binaries.yaml's tests:
# section): examples-lint, examples-unit, examples-integration, examples-test (all).
# They run in environments shipyard makes from the example projects, not in a nox venv.
stages(prefix="examples-", names=("lint", "unit", "integration"))
