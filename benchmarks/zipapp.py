"""Zipapps of one real application built with shipyard, shiv and pex: time, size, startup.

    python benchmarks/zipapp.py [--builds N] [--starts N] [--app black]

Each tool builds the same project (a pyproject that depends on the application)
for this machine, its caches warmed by one untimed build first. Reported: median
build time, file size, median cold start (a fresh extraction/cache folder each run)
and median warm start, then shipyard's ratios against the promised targets. Exits
non-zero only when a step fails; a missed target is printed as MISSED.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from _common import BenchError, Target, ensure_modules, format_table, timed

from shipyard.builders.wheel import WheelBuilder
from shipyard.builders.zipapp import ZipappBuilder, ZipappOptions
from shipyard.engine.plan import Action, Selection, make_plan
from shipyard.engine.scheduler import BuildContext, Builder, run_plan
from shipyard.manifest import load_manifest
from shipyard.stamp import read_stamp

APPS = {"black": ("black", "black:patched_main"), "httpie": ("httpie", "httpie.__main__:main")}
PROJECT = """\
[build-system]
requires = ["hatchling>=1.21"]
build-backend = "hatchling.build"

[project]
name = "bench-app"
version = "1.0.0"
dependencies = ["{requirement}"]

[tool.hatch.build.targets.wheel]
bypass-selection = true
"""
MANIFEST = """\
schema: 1
project: {{name: bench, version: "1.0.0", python: "{python}"}}
binaries:
  app:
    source: app
    entrypoint: {entrypoint}
    platforms: [{platform}]
"""
HOST_PLATFORM = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}.get(
    platform.machine(), "linux/amd64"
)


@dataclass(frozen=True)
class Tool:
    """How one tool builds the project, where the archive lands, and its cache variable."""

    name: str
    build: list[str]
    output: Path
    cache_env: str


@dataclass(frozen=True)
class Figures:
    """One tool's medians."""

    build: float
    size: int
    cold: float
    warm: float
    shows: str


def _shipyard_build(work: Path) -> None:
    """Build the project's wheel and zipapp with the shipyard library (the timed command)."""
    loaded = load_manifest(work / "binaries.yaml")
    binaries = {n: replace(b, outputs=("wheel", "zipapp")) for n, b in loaded.binaries.items()}
    manifest = replace(loaded, binaries=binaries)
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000"}
    stamp = read_stamp(work, manifest.project.version, env)
    ctx = BuildContext(work, work / "dist", stamp, manifest.project.python, env)

    def options(action: Action) -> ZipappOptions:
        return ZipappOptions(manifest.binaries[action.binaries[0]].entrypoint)

    # The library, not the CLI: its action cache would turn every timed build into a hit.
    builders: dict[str, Builder] = {"wheel": WheelBuilder(), "zipapp": ZipappBuilder(options)}
    for result in run_plan(make_plan(manifest, Selection()), ctx, builders):
        if result.status != "built":
            raise BenchError(f"{result.action.id}: {result.status}: {result.reason}")


def _tools(work: Path, entrypoint: str) -> list[Tool]:
    app = str(work / "app")
    out = work / "out"
    version = "1.0.0-" + HOST_PLATFORM.replace("/", "_")
    return [
        Tool(
            "shipyard",
            [sys.executable, __file__, "--shipyard-build", str(work)],
            work / "dist" / "zipapps" / f"app-{version}.pyz",
            "SHIPYARD_ZIPAPP_ROOT",
        ),
        Tool(
            "shiv",
            [sys.executable, "-m", "shiv", "-o", str(out / "app.shiv.pyz"), "-e", entrypoint, app],
            out / "app.shiv.pyz",
            "SHIV_ROOT",
        ),
        Tool(
            "pex",
            [sys.executable, "-m", "pex", app, "-e", entrypoint, "-o", str(out / "app.pex")],
            out / "app.pex",
            "PEX_ROOT",
        ),
    ]


def _measure(tools: list[Tool], work: Path, builds: int, starts: int) -> dict[str, Figures]:
    """Every figure of every tool; runs take turns, so a busy machine slows all tools alike."""

    def clean(tool: Tool) -> None:
        if tool.name == "shipyard":
            shutil.rmtree(work / "dist", ignore_errors=True)  # the wheel too: build it again
        tool.output.unlink(missing_ok=True)

    def command(tool: Tool) -> list[str]:
        return [sys.executable, str(tool.output), "--version"]

    def cache(tool: Tool, name: str) -> dict[str, str]:
        return {**os.environ, tool.cache_env: str(work / "caches" / tool.name / name)}

    for tool in tools:
        print(f"{tool.name}: warm-up build ...", flush=True)
        clean(tool)
        timed(tool.build)
    build: dict[str, list[float]] = {t.name: [] for t in tools}
    for round_ in range(builds):
        print(f"timed builds, round {round_ + 1} of {builds} ...", flush=True)
        for tool in tools:
            clean(tool)
            build[tool.name].append(timed(tool.build)[0])
    sizes = {t.name: t.output.stat().st_size for t in tools}
    print(f"{starts} cold and {starts} warm starts each ...", flush=True)
    cold: dict[str, list[float]] = {t.name: [] for t in tools}
    warm: dict[str, list[float]] = {t.name: [] for t in tools}
    shows = {t.name: timed(command(t), env=cache(t, "warm"))[1].strip() for t in tools}
    for index in range(starts):
        for tool in tools:
            cold[tool.name].append(timed(command(tool), env=cache(tool, f"cold{index}"))[0])
            warm[tool.name].append(timed(command(tool), env=cache(tool, "warm"))[0])
    return {
        t.name: Figures(
            statistics.median(build[t.name]),
            sizes[t.name],
            statistics.median(cold[t.name]),
            statistics.median(warm[t.name]),
            shows[t.name].splitlines()[0],
        )
        for t in tools
    }


def report(figures: dict[str, Figures]) -> str:
    """The table of medians and shipyard's ratios against the targets."""
    rows = [
        [
            name,
            f"{f.build:.2f}",
            f"{f.size / 1e6:.2f}",
            f"{f.cold * 1e3:.0f}",
            f"{f.warm * 1e3:.0f}",
        ]
        for name, f in figures.items()
    ]
    ours, shiv, pex = figures["shipyard"], figures["shiv"], figures["pex"]
    targets = [
        Target("build time vs shiv", ours.build / shiv.build, 0.5),
        Target("build time vs pex", ours.build / pex.build, 0.25),
        Target("warm startup vs shiv", ours.warm / shiv.warm, 1.0),
        Target("size vs shiv", ours.size / shiv.size, 1.1),
        Target("warm startup vs pex", ours.warm / pex.warm, None),
        Target("cold startup vs shiv", ours.cold / shiv.cold, None),
        Target("cold startup vs pex", ours.cold / pex.cold, None),
        Target("size vs pex", ours.size / pex.size, None),
    ]
    shown = [f"  {name:<9} {f.shows}" for name, f in figures.items()]
    return "\n".join(
        [
            format_table(["tool", "build s", "size MB", "cold ms", "warm ms"], rows),
            "",
            "each archive's --version:",
            *shown,
            "",
            "shipyard / other (medians):",
            *(t.line() for t in targets),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 0 when every step worked, whatever the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--builds", type=int, default=3, help="timed builds per tool (3)")
    parser.add_argument("--starts", type=int, default=7, help="timed starts per kind (7)")
    parser.add_argument("--app", choices=sorted(APPS), default="black")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--shipyard-build", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.shipyard_build:
        _shipyard_build(args.shipyard_build)
        return 0
    requirement, entrypoint = APPS[args.app]
    work = Path(tempfile.mkdtemp(prefix="shipyard-bench-"))
    try:
        ensure_modules("shiv", "pex")
        (work / "app").mkdir()
        (work / "out").mkdir()
        (work / "app" / "pyproject.toml").write_text(PROJECT.format(requirement=requirement))
        python = f"{sys.version_info[0]}.{sys.version_info[1]}"
        manifest = MANIFEST.format(python=python, entrypoint=entrypoint, platform=HOST_PLATFORM)
        (work / "binaries.yaml").write_text(manifest)
        print(f"{args.app} for {HOST_PLATFORM}, Python {python}, in {work}", flush=True)
        figures = _measure(_tools(work, entrypoint), work, args.builds, args.starts)
    except (BenchError, OSError) as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(report(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
