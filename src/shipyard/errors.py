"""The few typed exceptions shipyard raises; the CLI edge turns them into exit codes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BuildError",
    "Location",
    "ManifestError",
    "Problem",
    "ShipyardError",
    "UsageError",
]


class ShipyardError(Exception):
    """Base of every error shipyard raises on purpose; `exit_code` is what the CLI returns."""

    exit_code = 1


class UsageError(ShipyardError):
    """Bad arguments or environment: the user can fix it without touching code (exit 2)."""

    exit_code = 2


@dataclass(frozen=True)
class Location:
    """A place in a file, 1-based line and column as editors show them."""

    file: Path
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a manifest: where, which key, what, and how to fix it."""

    location: Location
    path: str
    message: str
    hint: str = ""

    def __str__(self) -> str:
        where = f"{self.location}: " + (f"{self.path}: " if self.path else "")
        return _one_line(where + self.message + (f" ({self.hint})" if self.hint else ""))


# A problem is one line of a terminal: whatever a message quotes from the manifest,
# line breaks of any kind (U+0085, U+2028, ...) and control characters are escaped,
# and a line stays readable in length.
_MAX_LINE = 1000


def _one_line(text: str) -> str:
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= _MAX_LINE else text[: _MAX_LINE - 3] + "..."


class ManifestError(UsageError):
    """The manifest is invalid; carries every problem found, each with its location."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class BuildError(ShipyardError):
    """An action failed; names the action, the command and the log to read."""

    def __init__(
        self,
        action: str,
        message: str,
        *,
        command: list[str] | None = None,
        log: Path | None = None,
    ) -> None:
        self.action = action
        self.command = command
        self.log = log
        detail = f"{action}: {message}"
        if command:
            detail += "\n  command: " + " ".join(command)
        if log:
            detail += f"\n  log: {log}"
        super().__init__(detail)
