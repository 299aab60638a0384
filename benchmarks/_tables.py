"""Put the tables the benchmarks printed into the README, between their markers.

    python benchmarks/_tables.py TABLES_DIR README.md

Each benchmark writes its Markdown tables with `_common.record(name, text)` into
`TABLES_DIR/<name>.md` (`nox -s bench` sets `BENCH_TABLES` to `dist/bench`). The README
holds each table between `<!-- bench:<name> -->` and `<!-- /bench:<name> -->`; this
script replaces what is between the markers with the recorded text, so the published
figures are the last run's output and never typed by hand. A marker without a recorded
table is left as it is and named; a recorded table without a marker is named too.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

__all__ = ["fill", "main"]

_BLOCK = re.compile(
    r"(?P<open><!-- bench:(?P<name>[a-z0-9-]+) -->\n)"
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


def main(argv: list[str]) -> int:
    """Fill README.md from the recorded tables; 2 on bad arguments."""
    if len(argv) != 2:
        print("usage: python benchmarks/_tables.py TABLES_DIR README.md", file=sys.stderr)
        return 2
    folder, readme = Path(argv[0]), Path(argv[1])
    tables = {path.stem: path.read_text() for path in sorted(folder.glob("*.md"))}
    text, filled, missing = fill(readme.read_text(), tables)
    readme.write_text(text)
    unplaced = sorted(set(tables) - set(filled))
    print(f"tables: filled {', '.join(filled) or 'none'} in {readme}")
    if missing:
        print(f"tables: no table recorded for {', '.join(missing)} (left as they were)")
    if unplaced:
        print(f"tables: recorded but not in {readme}: {', '.join(unplaced)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
