"""Put what the benchmarks printed into the performance page, between their markers.

    python benchmarks/_tables.py TABLES_DIR FILE [FILE ...]

`nox -s bench` keeps each benchmark's output in `TABLES_DIR/<script>.txt` (TABLES_DIR is
`dist/bench`) and fills docs/performance.md, the one page the figures are published on
(the README links to it). Each FILE holds a benchmark's output between
`<!-- bench:<script> -->` and `<!-- /bench:<script> -->`; this script replaces what is
between the markers with that output as a text block, so the published figures are the
last run's own words and never typed by hand. A FILE without markers is left as it is; a
marker without a recorded output is left as it is and named; an output that no FILE has a
marker for is named too.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

__all__ = ["block", "fill", "main"]

_BLOCK = re.compile(
    r"(?P<open><!-- bench:(?P<name>[a-z0-9_-]+) -->\n)"
    r"(?P<body>.*?)"
    r"(?P<close><!-- /bench:(?P=name) -->)",
    re.S,
)


def fill(text: str, tables: dict[str, str]) -> tuple[str, list[str], list[str]]:
    """`text` with every marked block replaced by its table; the names filled and the
    names of markers that had no table."""
    filled: list[str] = []
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in tables:
            missing.append(name)
            return match[0]
        filled.append(name)
        return match["open"] + tables[name].rstrip("\n") + "\n" + match["close"]

    return _BLOCK.sub(replace, text), filled, missing


def block(script: str, output: str, when: str) -> str:
    """A benchmark's output as the README shows it: where it came from, then the text."""
    return (
        f"Printed by `benchmarks/{script}.py` (`nox -s bench`) on {when}:\n\n"
        f"```text\n{output.strip()}\n```\n"
    )


def main(argv: list[str]) -> int:
    """Fill each FILE from the recorded tables; 2 on bad arguments."""
    if len(argv) < 2:
        print("usage: python benchmarks/_tables.py TABLES_DIR FILE [FILE ...]", file=sys.stderr)
        return 2
    folder, files = Path(argv[0]), [Path(a) for a in argv[1:]]
    tables = {}
    for path in sorted(folder.glob("*.txt")):
        when = time.strftime("%Y-%m-%d", time.gmtime(path.stat().st_mtime))
        tables[path.stem] = block(path.stem, path.read_text(), when)
    placed: set[str] = set()
    for target in files:
        text, filled, missing = fill(target.read_text(), tables)
        target.write_text(text)
        placed.update(filled)
        print(f"tables: filled {', '.join(filled) or 'none'} in {target}")
        if missing:
            print(f"tables: no table recorded for {', '.join(missing)} (left as they were)")
    unplaced = sorted(set(tables) - placed)
    if unplaced:
        where = ", ".join(str(f) for f in files)
        print(f"tables: recorded but not in {where}: {', '.join(unplaced)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
