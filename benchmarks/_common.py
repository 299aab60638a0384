"""Helpers the benchmarks share: timing commands, installing competitors, printing tables."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["BenchError", "Target", "ensure_modules", "format_table", "timed"]


class BenchError(Exception):
    """A benchmark step failed (not a missed target): the run cannot be trusted."""


def timed(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    stdin: str | None = None,
) -> tuple[float, str]:
    """Run `command` once; its wall time in seconds and its stdout. Fails on a non-zero exit."""
    start = time.perf_counter()
    done = subprocess.run(
        list(command),
        env=dict(env if env is not None else os.environ),
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise BenchError(f"{' '.join(command)} exited {done.returncode}:\n{tail}")
    return elapsed, done.stdout


def ensure_modules(*names: str) -> None:
    """pip-install the named distributions whose module is missing from this interpreter."""
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    if missing:
        print(f"installing {', '.join(missing)} with pip ...", flush=True)
        timed([sys.executable, "-m", "pip", "install", "--quiet", *missing])


@dataclass(frozen=True)
class Target:
    """A ratio the benchmark promises: `value` must be at most `limit`."""

    label: str
    value: float
    limit: float | None

    def line(self) -> str:
        """One row of the ratio report, with MISSED when the limit is exceeded."""
        if self.limit is None:
            return f"  {self.label:<26} {self.value:6.2f}x   (no target)"
        verdict = "ok" if self.value <= self.limit else "MISSED"
        return f"  {self.label:<26} {self.value:6.2f}x   target <= {self.limit:.2f}x   {verdict}"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain text table, first column left-aligned and the rest right-aligned."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        first = f"{cells[0]:<{widths[0]}}"
        rest = [f"{c:>{w}}" for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest])

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])
