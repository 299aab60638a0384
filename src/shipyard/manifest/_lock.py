"""A binary's lock file: hash-pinned PEP 508 requirements, as `uv pip compile` writes them.

pip reads more than requirements from such a file: `-r` and `-c` pull in other
files, `-e` installs from a folder, and per-requirement options such as
`--global-option` or `--config-settings` reach build back ends. A lock file a
manifest names may hold requirements with `--hash=` options, comments, and the
index URLs uv emits; anything else is reported before pip sees it.
"""

from __future__ import annotations

import re
from pathlib import Path

from shipyard.errors import Location, Problem
from shipyard.manifest._report import MAX_PROBLEMS, shown

__all__ = ["lock_problems"]

# Far above any real lock file (this repository's largest is some 60 KiB).
_MAX_BYTES = 16 << 20
_HASH = re.compile(r"--hash=(sha256:[0-9a-f]{64}|sha384:[0-9a-f]{96}|sha512:[0-9a-f]{128})")
_INDEX = re.compile(r"(--index-url|--extra-index-url)[ =]https?://[^\s]+")
_COMMENT = re.compile(r"(^|\s)#.*$")
_FIX = "regenerate it: uv pip compile --generate-hashes"


def _lines(text: str) -> list[tuple[int, str]]:
    """Logical lines (continuations joined, comments dropped) with their first line number."""
    out: list[tuple[int, str]] = []
    start = 0
    parts: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = _COMMENT.sub("", raw)
        if not parts:
            start = number
        if line.endswith("\\"):
            parts.append(line[:-1])
            continue
        parts.append(line)
        joined = " ".join(" ".join(parts).split())
        if joined:
            out.append((start, joined))
        parts = []
    if parts and " ".join(parts).strip():
        out.append((start, " ".join(" ".join(parts).split())))
    return out


def _check(line: str, where: Location, key: str) -> Problem | None:
    from packaging.requirements import InvalidRequirement, Requirement

    if line.startswith("-"):
        if _INDEX.fullmatch(line):
            return None
        return Problem(
            where,
            key,
            f"{shown(line.split(maxsplit=1)[0])} is not allowed in a lock file",
            "a lock file holds requirements with --hash options, comments and index URLs",
        )
    words = line.split(" ")
    split = next((i for i, w in enumerate(words) if w.startswith("-")), len(words))
    text, options = " ".join(words[:split]), words[split:]
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        reason = str(exc).splitlines()[0]
        return Problem(where, key, f"{shown(text)} is not a PEP 508 requirement: {reason}", _FIX)
    for option in options:
        if not _HASH.fullmatch(option):
            return Problem(
                where,
                key,
                f"{shown(option)} is not allowed after a requirement",
                "only --hash=sha256:<hex> options may follow one",
            )
    pinned = requirement.url or any(s.operator in ("==", "===") for s in requirement.specifier)
    if not pinned or not options:
        return Problem(
            where, key, f"{requirement.name} is not pinned with == and --hash options", _FIX
        )
    return None


def lock_problems(path: Path, key: str) -> list[Problem]:
    """What is wrong with the lock file at `path` (which exists); `key` names the manifest key."""
    try:
        with path.open("rb") as file:
            data = file.read(_MAX_BYTES + 1)
    except OSError as exc:
        return [Problem(Location(path, 1, 1), key, f"cannot read the lock file: {exc.strerror}")]
    if len(data) > _MAX_BYTES:
        return [Problem(Location(path, 1, 1), key, f"the lock file is over {_MAX_BYTES} bytes")]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return [Problem(Location(path, line, 1), key, "the lock file is not UTF-8", _FIX)]
    problems = []
    for number, logical in _lines(text):
        problem = _check(logical, Location(path, number, 1), key)
        if problem is not None:
            problems.append(problem)
            if len(problems) >= MAX_PROBLEMS:
                break
    return problems
