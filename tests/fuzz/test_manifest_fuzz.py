"""Fuzzing `shipyard check` and `shipyard plan --json` with generated manifests.

For every generated binaries.yaml, run in-process through the CLI's `main`:

- no traceback: `main` returns (never raises) and the exit code is 0 or 2;
- on exit 2, stderr is `shipyard: error: FILE:LINE:COL: ...` lines, at most a few
  dozen of them, naming a file of the repository;
- on exit 0, `check` says ok and `plan --json` prints JSON;
- neither command starts a process;
- each command uses less than MAX_SECONDS of CPU (CPU rather than wall-clock time, so
  that other work on a busy machine does not fail it; MAX_WALL_SECONDS still catches
  a command that sleeps; one over either is run twice more and the quickest run
  counts, since a hang is slow every time), and resident memory never rises MAX_MB above
  where it stood when the command started (Linux resets the peak for each command;
  elsewhere the peak since the first example is the bound, hypothesis's own growth
  included).

SHIPYARD_FUZZ_EXAMPLES sets the examples per property (default 200, so the unit stage
stays fast; `nox -s fuzz` sets 10000). SHIPYARD_FUZZ_SEED pins hypothesis's seed.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import io
import json
import os
import re
import resource
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from shipyard import cli
from tests.fuzz.hostile import hostile_files
from tests.fuzz.strategies import ENVIRONMENT, UNSET, manifests
from tests.reliability import record
from tests.sealed import seal

EXAMPLES = int(os.environ.get("SHIPYARD_FUZZ_EXAMPLES", "200"))
SEED = os.environ.get("SHIPYARD_FUZZ_SEED")
MAX_SECONDS = 2.0
MAX_WALL_SECONDS = 10.0
MAX_MB = 200.0
MAX_ERROR_LINES = 25
COMMANDS = (("check",), ("plan", "--json"))
_ERROR_LINE = re.compile(r"(/[^:]+):(\d+):(\d+): ")
GOOD_LOCK = """\
# uv pip compile --generate-hashes
click==8.1.7 \\
    --hash=sha256:ae74fb96c20a0277a1d615f1e4d73c8414f5a98db8b799a7931d1582f3390c28
    # via app
"""
HOSTILE_LOCK = "click==8.1.7 --global-option=--evil\n-r /etc/shadow\n$(id)\n"


def make_repository(root: Path) -> Path:
    """A repository the generated manifests point into: sources, locks, odd links."""
    (root / ".git").mkdir(parents=True)
    for name in ("app", "lib"):
        (root / name).mkdir()
        (root / name / "pyproject.toml").write_text(f"[project]\nname = '{name}'\n")
    (root / "locks").mkdir()
    (root / "locks" / "good.txt").write_text(GOOD_LOCK)
    (root / "locks" / "hostile.txt").write_text(HOSTILE_LOCK)
    (root / "Dockerfile").write_text("FROM scratch\n")
    (root / "loop").symlink_to(root / "loop")
    (root / "out").symlink_to("/")
    manifest = root / "binaries.yaml"
    # Warm up: the first load imports pydantic and builds its validators, which
    # takes a second that no manifest is to blame for.
    manifest.write_text(
        "schema: 1\nproject: {name: demo}\nbinaries: {app: {source: app, entrypoint: 'a:b'}}\n"
    )
    for command in COMMANDS:
        assert run_cli(["-f", str(manifest), *command]).code == 0
    return manifest


class PeakMemory:
    """How far resident memory rose during a command, in MB."""

    _STATUS = Path("/proc/self/status")

    def __init__(self) -> None:
        self.per_command = self._reset()
        self.start = self._status("VmRSS") if self.per_command else self._max_rss()

    @staticmethod
    def _reset() -> bool:
        try:  # Linux: "5" resets the peak resident set size (VmHWM) to the current one
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            return False
        return True

    def _status(self, field: str) -> float:
        for line in self._STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
        raise AssertionError(f"no {field} in {self._STATUS}")

    @staticmethod
    def _max_rss() -> float:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (1 << 20) if sys.platform == "darwin" else peak / (1 << 10)

    def before(self) -> None:
        """Call before each command."""
        if self.per_command:
            self._reset()
            self.start = self._status("VmRSS")

    def rise(self) -> float:
        """The rise since `before` (or since this object was made, without /proc)."""
        if self.per_command:
            return self._status("VmHWM") - self.start
        return self._max_rss() - self.start


@dataclass
class Tally:
    """What the runs saw, for the assertions and the reliability record."""

    examples: int = 0
    exits: dict[int, int] = field(default_factory=lambda: {0: 0, 2: 0})
    max_seconds: float = 0.0
    peak_mb: float = 0.0
    memory: PeakMemory = field(default_factory=PeakMemory)

    def sentence(self) -> str:
        runs = sum(self.exits.values())
        return (
            f"{runs} CLI runs over {self.examples} manifests: {self.exits[0]} exited 0, "
            f"{self.exits[2]} exited 2 with file:line:col errors, none raised; slowest "
            f"{self.max_seconds:.2f} s of CPU (limit {MAX_SECONDS:.0f} s); resident memory "
            f"rose at most {self.peak_mb:.1f} MB in a command (limit {MAX_MB:.0f} MB)"
        )

    def figures(self) -> dict[str, int | float | str]:
        return {
            "examples": self.examples,
            "exit_0": self.exits[0],
            "exit_2": self.exits[2],
            "max_seconds": round(self.max_seconds, 3),
            "peak_mb": round(self.peak_mb, 1),
        }


@pytest.fixture
def sealed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """A fixed environment, and no way to start a process."""
    for name, value in ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    for name in UNSET:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SHIPYARD_CACHE_DIR", str(tmp_path / "cache"))
    # A valid manifest gets as far as reading the repository's projects, which asks
    # git (fixed arguments, in the manifest's folder); nothing else may start.
    seal(monkeypatch, git=True)
    # main() builds its argument parser on every call, which costs more than loading
    # a manifest; build it once so the examples go to the loader.
    monkeypatch.setattr(cli, "parser", functools.cache(cli.parser))
    monkeypatch.chdir(tmp_path)
    yield


@dataclass(frozen=True)
class Run:
    """One command: exit code, output, CPU and wall-clock seconds, memory rise in MB."""

    code: int
    out: str
    err: str
    cpu: float
    wall: float
    mb: float = 0.0

    @property
    def in_time(self) -> bool:
        return self.cpu < MAX_SECONDS and self.wall < MAX_WALL_SECONDS


def run_cli(argv: list[str], memory: PeakMemory | None = None) -> Run:
    """`main(argv)` with its output captured, timed, and its memory measured."""
    out, err = io.StringIO(), io.StringIO()
    if memory:
        memory.before()
    # Hypothesis's heap grows with every example; a full garbage collection that
    # happened to start inside the command would walk all of it. Frozen objects are
    # not walked, so the command pays for its own only.
    gc.freeze()
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(argv)
    finally:
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        gc.unfreeze()
    mb = memory.rise() if memory else 0.0
    return Run(code, out.getvalue(), err.getvalue(), cpu, wall, mb)


def timed(argv: list[str], memory: PeakMemory) -> Run:
    """The run, or on a busy machine the quickest of three: a hang is slow every time."""
    run = run_cli(argv, memory)
    for _ in range(2):
        if run.in_time:
            break
        again = run_cli(argv, memory)
        run = again if again.cpu + again.wall < run.cpu + run.wall else run
    return run


def check_one(manifest: Path, data: bytes, tally: Tally) -> None:
    """Write `data` as the manifest and hold every property for each command."""
    manifest.write_bytes(data)
    tally.examples += 1
    for command in COMMANDS:
        run = timed(["-f", str(manifest), *command], tally.memory)
        shown = f"{command[0]} of {data[:300]!r}... ({len(data)} bytes)"
        assert run.code in (0, 2), f"exit {run.code}: {shown}\n{run.err}"
        assert run.cpu < MAX_SECONDS, f"{run.cpu:.2f} s of CPU: {shown}"
        assert run.wall < MAX_WALL_SECONDS, f"{run.wall:.2f} s: {shown}"
        assert run.mb < MAX_MB, f"{run.mb:.0f} MB: {shown}"
        tally.exits[run.code] += 1
        tally.max_seconds = max(tally.max_seconds, run.cpu)
        tally.peak_mb = max(tally.peak_mb, run.mb)
        if run.code == 2:
            assert run.err.startswith("shipyard: error: "), f"{run.err[:300]!r}: {shown}"
            lines = run.err.removeprefix("shipyard: error: ").splitlines()
            assert len(lines) <= MAX_ERROR_LINES, f"{len(lines)} lines: {shown}\n{run.err[:2000]}"
            for line in lines:
                found = _ERROR_LINE.match(line)
                assert found, f"not FILE:LINE:COL: {line[:300]!r}: {shown}"
                assert Path(found.group(1)).is_relative_to(manifest.parent), line
                assert len(line) < 2000, f"a {len(line)}-character error line: {shown}"
        elif command[0] == "check":
            assert " ok, " in run.out, run.out
        else:
            assert "actions" in json.loads(run.out)


def fuzz(strategy: st.SearchStrategy[bytes], manifest: Path, tally: Tally) -> Callable[[], None]:
    """The hypothesis test over `strategy`, with this suite's settings."""

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )
    @given(data=strategy)
    def run(data: bytes) -> None:
        check_one(manifest, data, tally)

    return seed(int(SEED))(run) if SEED else run


@pytest.mark.reliability
@pytest.mark.usefixtures("sealed")
def test_mutated_manifests_never_crash(tmp_path: Path) -> None:
    tally = Tally()
    fuzz(manifests(), make_repository(tmp_path / "repo"), tally)()
    assert tally.exits[0] > 0 and tally.exits[2] > 0, tally
    record(
        "generated manifests through check and plan --json",
        area="manifests",
        cases=tally.examples,
        injected="valid-shaped manifests with hostile or random values, structural "
        "mutations and text edits (duplicate lines, anchors, stray bytes, truncation)",
        result=tally.sentence(),
        figures=tally.figures(),
    )


@pytest.mark.reliability
@pytest.mark.usefixtures("sealed")
def test_hostile_files_never_crash_hang_or_balloon(tmp_path: Path) -> None:
    tally = Tally()
    fuzz(hostile_files(), make_repository(tmp_path / "repo"), tally)()
    assert tally.exits[2] > 0, tally
    record(
        "hostile manifest files through check and plan --json",
        area="manifests",
        cases=tally.examples,
        injected="random and non-UTF-8 bytes, BOMs, control characters, alias and "
        "merge-key bombs, nesting to 5000 levels, files over 1 MiB, 30000 keys, "
        "${} floods and self references, odd tags and numbers",
        result=tally.sentence(),
        figures=tally.figures(),
    )
