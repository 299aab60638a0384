"""A project's own wheel, warm: shipyard's wheel builder against `uv build` and `python -m build`.

    python benchmarks/wheel.py [--backend hatchling|setuptools ...] [--runs N]

For each backend, a trivial project (one module, depending on black) is built by
shipyard's WheelBuilder (its reused build environment, `shipyard.builders.backends`),
by `uv build --wheel` and by `python -m build --wheel --installer uv` (each making a
fresh isolated environment), every tool warmed by one untimed build first and the runs
taking turns. The backend comes from the configured package index, as in a build.

Reported per backend: each tool's median wall time, then shipyard's ratios from the same
run against the targets, and shipyard's median against the absolute target (0.3 s on an
idle machine), MISSED next to a missed one. Exits non-zero only when a step fails.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from _common import BenchError, Target, format_table, timed

from shipyard.builders.wheel import WheelBuilder
from shipyard.engine.plan import Action
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import BuildContext
from shipyard.process import uv_binary
from shipyard.stamp import Stamp

BACKENDS = {
    "hatchling": (
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
        '[tool.hatch.build.targets.wheel]\npackages = ["src/wrapblack"]\n'
    ),
    "setuptools": (
        '[build-system]\nrequires = ["setuptools>=61"]\n'
        'build-backend = "setuptools.build_meta"\n\n'
        '[tool.setuptools.packages.find]\nwhere = ["src"]\n'
    ),
}
PROJECT = (
    '[project]\nname = "wrapblack"\nversion = "1.0"\nrequires-python = ">=3.11"\n'
    'dependencies = ["black==24.10.0"]\n\n[project.scripts]\nwrapblack = "wrapblack:main"\n\n'
)
ABSOLUTE_TARGET = 0.3  # seconds, warm, for a trivial project


def _project(folder: Path, backend: str) -> Path:
    home = folder / backend
    (home / "src" / "wrapblack").mkdir(parents=True)
    (home / "src" / "wrapblack" / "__init__.py").write_text(
        "import black\n\n\ndef main() -> int:\n    return black.main()\n"
    )
    (home / "pyproject.toml").write_text(PROJECT + BACKENDS[backend])
    return home


def _shipyard(home: Path, dist: Path) -> Callable[[], float]:
    ctx = BuildContext(
        home.parent, dist, Stamp("1.0", "abc", False, 1_700_000_000), "3.11", dict(os.environ)
    )
    action = Action("wheel:app", "wheel", ("app",), home)
    builder = wrapped(WheelBuilder())  # key and errors as in a build; no action cache

    def run() -> float:
        start = time.perf_counter()
        builder.run(action, ctx, ())
        return time.perf_counter() - start

    return run


def _command(command: Sequence[str], cwd: Path) -> Callable[[], float]:
    return lambda: timed(command, cwd=str(cwd))[0]


def bench(backend: str, runs: int, work: Path) -> list[Target]:
    """Time the three tools on one backend's project; print the table; the targets."""
    uv = uv_binary()
    if uv is None:
        raise BenchError("uv is needed (pip install uv)")
    home = _project(work, backend)
    out = work / f"{backend}-out"
    tools = {
        "shipyard": _shipyard(home, work / f"{backend}-dist"),
        "uv build": _command(
            [uv, "build", "--wheel", "--no-config", "-q", "--out-dir", str(out), "."], home
        ),
        "python -m build": _command(
            [sys.executable, "-m", "build", "--wheel", "--installer", "uv", "-o", str(out), "."],
            home,
        ),
    }
    print(f"{backend}: warm-up builds ...", flush=True)
    for run in tools.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in tools}
    for _ in range(runs):
        for name, run in tools.items():
            times[name].append(run())
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(format_table(["tool", "median s"], [[n, f"{m:.3f}"] for n, m in medians.items()]))
    ours = medians["shipyard"]
    return [
        Target(f"{backend} vs uv build", ours / medians["uv build"], 0.3),
        Target(f"{backend} vs python -m build", ours / medians["python -m build"], 0.3),
        Target(f"{backend} vs {ABSOLUTE_TARGET}s", ours / ABSOLUTE_TARGET, 1.0),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; print tables and the ratio report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", choices=sorted(BACKENDS))
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    targets: list[Target] = []
    try:
        with tempfile.TemporaryDirectory(prefix="shipyard-bench-wheel-") as tmp:
            for backend in args.backend or sorted(BACKENDS):
                targets += bench(backend, max(1, args.runs), Path(tmp))
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    print("\nshipyard's ratios (this run):")
    for target in targets:
        print(target.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
