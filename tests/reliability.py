"""Records for docs/reliability.md: each reliability test reports what it did.

A test calls `record(...)` once with the number of cases or trials it ran, what it
injected and what it observed. When `SHIPYARD_RELIABILITY_LOG` names a file (the
`nox -s reliability` session sets it) the record is appended to it as one JSON
line; otherwise nothing is written. `scripts/reliability_report.py` turns the
lines into the table in docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import sys

ENV = "SHIPYARD_RELIABILITY_LOG"


def record(
    check: str,
    *,
    area: str,
    cases: int,
    injected: str,
    result: str,
    figures: dict[str, int | float | str] | None = None,
) -> None:
    """Append one reliability record (when `$SHIPYARD_RELIABILITY_LOG` is set).

    `check` names the test (e.g. "push through a faulty proxy"), `area` groups
    it (network, manifests, archives, secrets, injection, transport, crash),
    `cases` counts trials or generated inputs, `injected` says what was done to
    the tool and `result` what was observed (a sentence, with numbers).
    `figures` holds extra measured values (faults injected, retries, seconds).
    """
    target = os.environ.get(ENV)
    if not target:
        return
    line = {
        "check": check,
        "area": area,
        "cases": cases,
        "injected": injected,
        "result": result,
        "figures": figures or {},
        "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
        "python": sys.version.split()[0],
    }
    with open(target, "a", encoding="utf-8") as out:
        out.write(json.dumps(line, sort_keys=True) + "\n")
