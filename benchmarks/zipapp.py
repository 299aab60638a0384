"""Zipapps of real applications by shipyard, shiv and pex against a virtualenv: build, size, start.

    python benchmarks/zipapp.py [--app black|httpie|mypy ...] [--builds N] [--starts N]

For each application (pinned), each tool builds the same project (a pyproject that
depends on the application) for this machine, its caches warmed by one untimed build
first; a plain virtualenv gets exactly the distributions shipyard's archive resolved
(its `_shipyard/build.json`), bytecode compiled as an installer does. Then every tool
runs the same real command (black formatting stdin, httpie building a request offline,
mypy checking a file) with the same interpreter binary, the base one: the archives as
`python ARCHIVE ...`, the virtualenv through its console script. Python writes
bytecode in every run (PYTHONDONTWRITEBYTECODE is unset), as it would for a user.

Reported per application: median build time, size, median cold start (a fresh
SHIPYARD_ZIPAPP_ROOT / SHIV_ROOT / PEX_ROOT each run) and median warm start (the same
root again after a first run), runs taking turns between tools; shipyard's build phase
by phase (timed inside its process: its wheel build, install, hashes, layout, archive
writing...), each phase also as its part of the build time ratio against shiv; then
shipyard's ratios from the same run against the targets (build time at most 0.35x
shiv's for black, 0.3x for httpie and mypy; warm start at most 1.1x a virtualenv's),
MISSED next to a missed one. Exits non-zero only when a step fails.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from _common import BenchError, Target, ensure_modules, format_table, timed

from shipyard.builders.wheel import WheelBuilder
from shipyard.builders.zipapp import ZipappBuilder, ZipappOptions
from shipyard.engine.plan import Action, Selection, make_plan
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import BuildContext, Builder, run_plan
from shipyard.manifest import load_manifest
from shipyard.stamp import read_stamp

BLACK_INPUT = """\
import os
def greet( name,greeting = 'hello' ) :
  '''Say it.'''
  parts=[ greeting,name ]
  return ' '.join( parts )
class Point :
  def __init__( self,x,y ) :
      self.x=x ; self.y=y
  def norm( self ) : return ( self.x**2+self.y**2 )**0.5
print( greet( os.environ.get( 'USER','world' ) ) , Point( 3,4 ).norm( ) )
"""
MYPY_INPUT = """\
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Point:
    x: float
    y: float

    def norm(self) -> float:
        return (self.x**2 + self.y**2) ** 0.5


def longest(points: list[Point]) -> Point | None:
    return max(points, key=lambda point: point.norm()) if points else None


print(longest([Point(3, 4), Point(1, 1)]))
"""


@dataclass(frozen=True)
class App:
    """One application of the corpus: what to depend on, what to run and how."""

    name: str
    requirement: str
    entrypoint: str
    script: str
    args: tuple[str, ...]
    stdin: str | None = None
    files: Mapping[str, str] = field(default_factory=dict)
    # The most shipyard's build time may be of shiv's (both build the wrapper project's
    # wheel and bundle it with the application).
    build_target: float = 0.3

    def describe(self) -> str:
        """The command as a user would type it in the virtualenv."""
        shown = " ".join((self.script, *self.args))
        return f"{shown} < {len(self.stdin.splitlines())}-line file" if self.stdin else shown


APPS = {
    app.name: app
    for app in (
        App(
            "black",
            "black==24.10.0",
            "black:patched_main",
            "black",
            ("-q", "-"),
            stdin=BLACK_INPUT,
            build_target=0.35,  # a small site: mostly the fixed cost of every build
        ),
        App(
            "httpie",
            "httpie==3.2.4",
            "httpie.__main__:main",
            "http",
            (
                "--offline",
                "--ignore-stdin",
                "POST",
                "http://127.0.0.1:8000/items",
                "name=shipyard",
                "count:=3",
                "X-Bench:yes",
            ),
            # No update check (a background daemon that goes to the network).
            files={"httpie/config.json": '{"disable_update_warnings": true}\n'},
        ),
        App(
            "mypy",
            "mypy==1.13.0",
            "mypy.__main__:console_entry",
            "mypy",
            ("--no-incremental", "--cache-dir", os.devnull, "sample.py"),
            files={"sample.py": MYPY_INPUT},
        ),
    )
}
PROJECT_NAME = "bench-app"
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
# Variables that would change what a timed run does, removed from its environment.
DROPPED = ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")
VENV = "venv"
# Warm start: at most this many times a virtualenv's (same interpreter, same files).
WARM_TARGET = 1.1
_R = TypeVar("_R")


@dataclass(frozen=True)
class Tool:
    """How one tool builds the project, where its archive lands, and its cache variable."""

    name: str
    build: list[str]
    output: Path
    cache_env: str

    def archive(self) -> Path:
        """The archive built: `output`, or the one .pyz in it when it is a folder."""
        if not self.output.is_dir():
            return self.output
        found = sorted(self.output.glob("*.pyz"))
        if len(found) != 1:
            raise BenchError(f"{self.name}: expected one .pyz in {self.output}, found {found}")
        return found[0]


@dataclass(frozen=True)
class Figures:
    """One tool's medians (None where a figure does not apply) and its command's output."""

    build: float | None
    size: int
    cold: float | None
    warm: float
    output: str
    # shipyard's build: median seconds of each phase (`PHASES`), else empty.
    phases: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Result:
    """Every figure of one application, and the interpreter's own start for context."""

    app: App
    figures: dict[str, Figures]
    bare: dict[str, float]


def base_python() -> str:
    """The interpreter binary under this one's virtualenv (this one when not in a venv)."""
    return os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable)


# The steps of shipyard's build that get a line in its phase breakdown: the function
# doing each, timed in the build's own process by wrapping it where its caller finds it.
TIMED = {
    "install": ("shipyard.builders.resolve", "_install"),
    "hashes": ("shipyard.builders.resolve", "locked_hashes"),
    "resolve": ("shipyard.builders.resolve", "resolve"),
    "layout": ("shipyard.builders.zipapp", "layout"),
    "write": ("shipyard.builders.zipapp", "write_archive"),
}
# The phase breakdown, each phase's own time (what it calls that has a line is not in it).
PHASES = {
    "start": "python start, imports",
    "engine": "manifest, plan, engine",
    "wheel": "wheel build (the project's)",
    "install": "zipapp: install the site",
    "hashes": "zipapp: wheel hashes (uv pip compile)",
    "resolve": "zipapp: rest of resolve (read site, checks)",
    "layout": "zipapp: layout (read files, build id)",
    "write": "zipapp: write archive (compress)",
    "zipapp": "zipapp: rest (entry point check, cleanup)",
}


class _Clock:
    """Seconds spent in each timed step, summed over threads and calls."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self._lock = threading.Lock()

    def wrap(self, name: str, fn: Callable[..., _R]) -> Callable[..., _R]:
        def timed_call(*args: object, **kwargs: object) -> _R:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self.spent[name] = self.spent.get(name, 0.0) + time.perf_counter() - start

        return timed_call


class _TimedBuilder:
    """A builder whose `build` is timed on `clock` as `name`."""

    def __init__(self, builder: Builder, clock: _Clock, name: str) -> None:
        self.kind = builder.kind
        self.inputs = builder.inputs
        self.build = clock.wrap(name, builder.build)


def _shipyard_build(work: Path) -> dict[str, float]:
    """Build the project's wheel and zipapp with the shipyard library (the timed command);
    the seconds of each phase in this process (`PHASES` but start) and `span`, all of it."""
    begin = time.perf_counter()
    clock = _Clock()
    for name, (module, attr) in TIMED.items():
        owner = importlib.import_module(module)
        if not hasattr(owner, attr):
            raise BenchError(f"{module}.{attr} is gone: update TIMED in {__file__}")
        setattr(owner, attr, clock.wrap(name, getattr(owner, attr)))
    loaded = load_manifest(work / "binaries.yaml")
    binaries = {n: replace(b, outputs=("wheel", "zipapp")) for n, b in loaded.binaries.items()}
    manifest = replace(loaded, binaries=binaries)
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000"}
    stamp = read_stamp(work, manifest.project.version, env)
    ctx = BuildContext(work, work / "dist", stamp, manifest.project.python, env)

    def options(action: Action) -> ZipappOptions:
        return ZipappOptions(manifest.binaries[action.binaries[0]].entrypoint)

    # The library, not the CLI: its action cache would turn every timed build into a hit.
    builders = {
        "wheel": wrapped(_TimedBuilder(WheelBuilder(), clock, "wheel")),
        "zipapp": wrapped(_TimedBuilder(ZipappBuilder(options), clock, "zipapp")),
    }
    for result in run_plan(make_plan(manifest, Selection()), ctx, builders):
        if result.status != "built":
            raise BenchError(f"{result.action.id}: {result.status}: {result.reason}")
    spent = dict.fromkeys(TIMED, 0.0) | clock.spent
    span = time.perf_counter() - begin
    # Each phase without the timed steps inside it.
    return {
        "span": span,
        "engine": span - spent["wheel"] - spent["zipapp"],
        "wheel": spent["wheel"],
        "install": spent["install"],
        "hashes": spent["hashes"],
        "resolve": spent["resolve"] - spent["install"] - spent["hashes"],
        "layout": spent["layout"],
        "write": spent["write"],
        "zipapp": spent["zipapp"] - spent["resolve"] - spent["layout"] - spent["write"],
    }


def _tools(work: Path, entrypoint: str) -> list[Tool]:
    app = str(work / "app")
    out = work / "out"
    return [
        Tool(
            "shipyard",
            [sys.executable, __file__, "--shipyard-build", str(work)],
            work / "dist" / "zipapps",  # per platform or universal: whichever it built
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


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def resolved(archive: Path) -> dict[str, str]:
    """The distributions (name: version) a shipyard zipapp resolved, its own project left out."""
    with zipfile.ZipFile(archive) as zf:
        info = json.loads(zf.read("_shipyard/build.json"))
    pins = {str(n): str(v) for n, v in info["distributions"].items()}
    return {n: v for n, v in pins.items() if _canonical(n) != PROJECT_NAME}


def make_venv(folder: Path, python: str, pins: Mapping[str, str]) -> None:
    """A virtualenv of `python` with exactly `pins` installed, bytecode compiled."""
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    requirements = [f"{name}=={version}" for name, version in sorted(pins.items())]
    venv_python = str(folder / "bin" / "python")
    if uv:
        timed([uv, "venv", "--quiet", "--python", python, str(folder)])
        install = [uv, "pip", "install", "--quiet", "--python", venv_python, "--compile-bytecode"]
    else:  # pip compiles bytecode by default
        timed([python, "-m", "venv", str(folder)])
        install = [venv_python, "-m", "pip", "install", "--quiet"]
    timed([*install, "--no-deps", *requirements])


def tree_size(folder: Path) -> int:
    """Bytes of every regular file under `folder` (links not followed)."""
    return sum(p.lstat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def run_env(work: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a timed run: bytecode written, no venv or path leaking in."""
    env = {k: v for k, v in os.environ.items() if k not in DROPPED}
    env["HTTPIE_CONFIG_DIR"] = str(work / "run" / "httpie")
    return {**env, **(extra or {})}


def _measure(
    app: App, tools: list[Tool], work: Path, python: str, builds: int, starts: int
) -> Result:
    """Every figure of every tool; runs take turns, so a busy machine slows all tools alike."""

    def clean(tool: Tool) -> None:
        if tool.name == "shipyard":
            shutil.rmtree(work / "dist", ignore_errors=True)  # the wheel too: build it again
        else:
            tool.output.unlink(missing_ok=True)

    for tool in tools:
        print(f"  {tool.name}: warm-up build ...", flush=True)
        clean(tool)
        timed(tool.build)
    build: dict[str, list[float]] = {t.name: [] for t in tools}
    phases: dict[str, list[float]] = {phase: [] for phase in PHASES}
    for round_ in range(builds):
        print(f"  timed builds, round {round_ + 1} of {builds} ...", flush=True)
        for tool in tools:
            clean(tool)
            seconds, output = timed(tool.build)
            build[tool.name].append(seconds)
            if tool.name == "shipyard":
                spent = json.loads(output.strip().splitlines()[-1])
                # What the build's process did not see: the interpreter's start, imports.
                spent["start"] = seconds - spent.pop("span")
                for phase in PHASES:
                    phases[phase].append(spent[phase])
    archives = {t.name: t.archive() for t in tools}
    sizes = {t.name: archives[t.name].stat().st_size for t in tools}

    pins = resolved(archives["shipyard"])
    print(f"  virtualenv with the {len(pins)} distributions shipyard resolved ...", flush=True)
    venv = work / VENV
    make_venv(venv, python, pins)
    sizes[VENV] = tree_size(venv)

    run = str(work / "run")
    commands = {t.name: [python, str(archives[t.name]), *app.args] for t in tools}
    commands[VENV] = [str(venv / "bin" / app.script), *app.args]
    roots = work / "roots"

    def start(name: str, root: str | None) -> tuple[float, str]:
        tool = next((t for t in tools if t.name == name), None)
        extra = {tool.cache_env: str(roots / name / root)} if tool and root else {}
        return timed(commands[name], env=run_env(work, extra), cwd=run, stdin=app.stdin)

    # The first run fills each warm root; its output is the one compared with the venv's.
    outputs = {name: start(name, "warm")[1] for name in commands}
    print(f"  {starts} cold and {starts} warm starts each ...", flush=True)
    cold: dict[str, list[float]] = {t.name: [] for t in tools}
    warm: dict[str, list[float]] = {name: [] for name in commands}
    names = list(commands)
    for index in range(starts):
        turn = names[index % len(names) :] + names[: index % len(names)]
        for name in turn:
            if name in cold:
                cold[name].append(start(name, f"cold{index}")[0])
                shutil.rmtree(roots / name / f"cold{index}")
        for name in turn:
            warm[name].append(start(name, "warm")[0])
    bare: dict[str, list[float]] = {"base": [], VENV: []}
    for _ in range(starts):
        bare["base"].append(timed([python, "-c", "pass"], env=run_env(work))[0])
        bare[VENV].append(timed([str(venv / "bin" / "python"), "-c", "pass"], env=run_env(work))[0])
    figures = {
        name: Figures(
            statistics.median(build[name]) if name in build else None,
            sizes[name],
            statistics.median(cold[name]) if name in cold else None,
            statistics.median(warm[name]),
            outputs[name],
            {k: statistics.median(v) for k, v in phases.items()} if name == "shipyard" else {},
        )
        for name in commands
    }
    return Result(app, figures, {k: statistics.median(v) for k, v in bare.items()})


def targets(app: App, figures: Mapping[str, Figures]) -> list[Target]:
    """shipyard's ratios against the others, with the promised limits."""
    ours, shiv, pex, venv = (figures[n] for n in ("shipyard", "shiv", "pex", VENV))
    assert ours.build and shiv.build and pex.build and ours.cold and shiv.cold and pex.cold
    return [
        Target("warm start vs venv", ours.warm / venv.warm, WARM_TARGET),
        Target("cold start vs shiv", ours.cold / shiv.cold, 1.0),
        Target("size vs shiv", ours.size / shiv.size, 1.1),
        Target("build time vs shiv", ours.build / shiv.build, app.build_target),
        Target("build time vs pex", ours.build / pex.build, 0.25),
        Target("warm start vs shiv", ours.warm / shiv.warm, None),
        Target("warm start vs pex", ours.warm / pex.warm, None),
        Target("cold start vs pex", ours.cold / pex.cold, None),
        Target("cold start vs venv", ours.cold / venv.warm, None),
        Target("size vs pex", ours.size / pex.size, None),
    ]


def phase_table(phases: Mapping[str, float], shiv: float) -> str:
    """shipyard's build phase by phase: median seconds, and each phase's part of the build
    time ratio against shiv (the parts add up to the ratio, medians allowing)."""
    rows = [[label, f"{phases[p]:.3f}", f"{phases[p] / shiv:.3f}"] for p, label in PHASES.items()]
    total = sum(phases.values())
    rows.append(["sum of the phases", f"{total:.3f}", f"{total / shiv:.3f}"])
    return format_table(["shipyard's build, by phase", "median s", "x shiv"], rows)


def report(result: Result) -> str:
    """One application's table of medians, shipyard's build by phase, and shipyard's
    ratios against the targets."""
    figures = result.figures
    expected = figures[VENV].output

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1e3:.0f}"

    rows = [
        [
            name,
            "-" if f.build is None else f"{f.build:.2f}",
            f"{f.size / 1e6:.2f}",
            ms(f.cold),
            ms(f.warm),
            "yes" if f.output == expected else "NO",
        ]
        for name, f in figures.items()
    ]
    headers = ["tool", "build s", "size MB", "cold ms", "warm ms", "same output as venv"]
    app = result.app
    return "\n".join(
        [
            f"== {app.requirement}: {app.describe()}",
            format_table(headers, rows),
            f"  (venv: installed files on disk; {VENV} cold = warm: nothing to unpack.",
            f"  `python -c pass`: base {ms(result.bare['base'])} ms,"
            f" venv {ms(result.bare[VENV])} ms.)",
            phase_table(figures["shipyard"].phases, figures["shiv"].build or 1.0),
            "shipyard / other (medians of the same run):",
            *(t.line() for t in targets(app, figures)),
        ]
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--app",
        action="append",
        choices=sorted(APPS),
        help="an application to measure, repeatable (all: " + ", ".join(APPS) + ")",
    )
    parser.add_argument("--builds", type=int, default=3, help="timed builds per tool (3)")
    parser.add_argument("--starts", type=int, default=11, help="timed starts per kind (11)")
    parser.add_argument("--keep", action="store_true", help="keep the work folders")
    parser.add_argument("--shipyard-build", type=Path, help=argparse.SUPPRESS)
    return parser


def bench(app: App, builds: int, starts: int, keep: bool) -> Result:
    """Set up one application's project, build it with every tool and time its starts."""
    work = Path(tempfile.mkdtemp(prefix=f"shipyard-bench-{app.name}-"))
    try:
        for folder in ("app", "out", "run", "roots"):
            (work / folder).mkdir()
        (work / "app" / "pyproject.toml").write_text(PROJECT.format(requirement=app.requirement))
        for name, text in app.files.items():
            (work / "run" / name).parent.mkdir(parents=True, exist_ok=True)
            (work / "run" / name).write_text(text)
        python = f"{sys.version_info[0]}.{sys.version_info[1]}"
        manifest = MANIFEST.format(python=python, entrypoint=app.entrypoint, platform=HOST_PLATFORM)
        (work / "binaries.yaml").write_text(manifest)
        print(f"{app.requirement} for {HOST_PLATFORM}, Python {python}, in {work}", flush=True)
        return _measure(app, _tools(work, app.entrypoint), work, base_python(), builds, starts)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 0 when every step worked, whatever the ratios."""
    args = _parser().parse_args(argv)
    if args.shipyard_build:
        print(json.dumps(_shipyard_build(args.shipyard_build)))
        return 0
    if args.builds < 1 or args.starts < 1:
        print("--builds and --starts must be at least 1", file=sys.stderr)
        return 2
    apps = [APPS[name] for name in dict.fromkeys(args.app or APPS)]
    results: list[Result] = []
    try:
        ensure_modules("shiv", "pex")
        print(f"interpreter for every run: {base_python()}", flush=True)
        for app in apps:
            results.append(bench(app, args.builds, args.starts, args.keep))
    except (BenchError, OSError) as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    missed = [
        f"{r.app.name}: {t.label}"
        for r in results
        for t in targets(r.app, r.figures)
        if t.limit is not None and t.value > t.limit
    ]
    for result in results:
        print()
        print(report(result))
    print()
    print(f"targets missed: {len(missed)}" + "".join(f"\n  MISSED {m}" for m in missed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
