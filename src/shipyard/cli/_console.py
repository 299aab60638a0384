"""Output for people and for CI logs; the only module besides the CLI that writes."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

from shipyard.engine.scheduler import Event, Result

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

__all__ = ["Display", "interactive"]


def interactive(stream: TextIO) -> bool:
    """A live display only on a terminal, and never in CI."""
    return stream.isatty() and not os.environ.get("CI")


class Display:
    """Progress while actions run, then a summary: rich on a terminal, plain lines otherwise."""

    def __init__(
        self,
        stream: TextIO | None = None,
        total: int = 0,
        *,
        noun: str = "actions",
        words: Mapping[str, str] | None = None,
    ) -> None:
        # The stderr of the moment (a test's capture), not the one at import.
        stream = sys.stderr if stream is None else stream
        self.stream = stream
        self.noun = noun
        self.words = dict(words or {})
        self.live = interactive(stream)
        self.progress: Progress | None = None
        self.tasks: dict[str, TaskID] = {}
        self.overall: TaskID | None = None
        if self.live:
            # rich is imported only for a terminal: CI logs and no-op builds skip its cost.
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.console = Console(file=stream, no_color=bool(os.environ.get("NO_COLOR")) or None)
            self.progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self.overall = self.progress.add_task(f"0/{total} {noun}", total=total)
            self.progress.start()
        self.total = total
        self.finished = 0

    def __call__(self, event: Event) -> None:
        """Show that an action started or finished."""
        result = event.result
        if result is None:
            self._line(f"start   {event.action.id}")
            if self.progress:
                self.tasks[event.action.id] = self.progress.add_task(event.action.id, total=None)
            return
        self.finished += 1
        self._line(
            f"{self.words.get(result.status, result.status):<7} {event.action.id} "
            f"({result.duration:.1f}s)"
            + (f": {result.reason.splitlines()[0]}" if result.reason else "")
        )
        if self.progress:
            task = self.tasks.pop(event.action.id, None)
            if task is not None:
                self.progress.remove_task(task)
            if self.overall is not None:
                self.progress.update(
                    self.overall,
                    completed=self.finished,
                    description=f"{self.finished}/{self.total} {self.noun}",
                )

    def planned(self, total: int) -> None:
        """Say how many actions will run, once the plan that runs is known."""
        self.total = total
        if self.progress and self.overall is not None:
            self.progress.update(self.overall, total=total, description=f"0/{total} {self.noun}")

    def _line(self, text: str) -> None:
        if self.progress:
            self.progress.console.print(text, markup=False, highlight=False)
        else:
            stamp = time.strftime("%H:%M:%S")
            print(f"[{stamp}] {text}", file=self.stream, flush=True)

    def close(self) -> None:
        """Stop the live display."""
        if self.progress:
            self.progress.stop()
            self.progress = None

    def summary(self, results: Sequence[Result]) -> None:
        """A table of every action and its outcome."""
        self.close()
        if self.live:
            from rich.table import Table

            table = Table(title="shipyard build")
            for column in ("action", "status", "time", "output"):
                table.add_column(column)
            for r in results:
                output = ", ".join(a.path.name for a in r.outputs if "blobs" not in a.path.parts)
                output = output or (r.reason.splitlines() or [""])[0]
                table.add_row(r.action.id, r.status, f"{r.duration:.1f}s", output)
            self.console.print(table)
            return
        for r in results:
            shown = [a for a in r.outputs if "blobs" not in a.path.parts]  # image layouts
            outputs = " ".join(f"{a.path.name} sha256:{a.sha256[:12]}" for a in shown[:3])
            if len(r.outputs) > 3:
                outputs += f" (+{len(r.outputs) - min(3, len(shown))} more)"
            print(f"{r.status:<7} {r.action.id:<40} {r.duration:6.1f}s {outputs}", file=self.stream)
