"""`python -m shipyard._docs DOCS_DIR`: write the generated reference pages there."""

from __future__ import annotations

import sys
from pathlib import Path

from shipyard._docs import write


def main(argv: list[str]) -> int:
    """Write the pages under argv[0] (default: docs); 2 on bad arguments."""
    if len(argv) > 1:
        print("usage: python -m shipyard._docs [DOCS_DIR]", file=sys.stderr)
        return 2
    changed = write(Path(argv[0] if argv else "docs"))
    print(f"docs: {len(changed)} generated page(s) changed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
