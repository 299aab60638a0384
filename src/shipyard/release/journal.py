"""publish.journal: what a release already published, so a re-run after a crash resumes.

One JSON object per line, appended and fsync'd before the step is considered
done. A line cut short by a kill is ignored on reading: its step was not
recorded, so it runs again, and the registry and index checks find it there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from shipyard.release.staged import JOURNAL

__all__ = ["JOURNAL_NAME", "Journal"]

JOURNAL_NAME = JOURNAL  # one name, owned by the staged release


class Journal:
    """An append-only record of finished publish steps, keyed by a step name."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._done: dict[str, dict[str, Any]] = {}
        if path.is_file():
            for line in path.read_bytes().splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a torn last line from a killed run
                if isinstance(record, dict) and isinstance(record.get("step"), str):
                    self._done[record["step"]] = record

    def done(self, step: str) -> bool:
        """True if `step` was recorded as finished."""
        return step in self._done

    def get(self, step: str) -> dict[str, Any] | None:
        """The record of `step`, or None."""
        return self._done.get(step)

    @property
    def steps(self) -> tuple[str, ...]:
        """Every recorded step, in the order first recorded."""
        return tuple(self._done)

    def record(self, step: str, **detail: Any) -> None:
        """Append `step` durably (written and fsync'd before returning)."""
        record = {"step": step, **detail}
        line = json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            with open(fd, "ab", closefd=False) as handle:
                # A torn line from a killed writer must not swallow this one.
                if handle.tell() > 0 and not self._ends_with_newline():
                    handle.write(b"\n")
                handle.write(line.encode())
                handle.flush()
            os.fsync(fd)
        finally:
            os.close(fd)
        self._done[step] = record

    def _ends_with_newline(self) -> bool:
        with self.path.open("rb") as handle:
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) == b"\n"
