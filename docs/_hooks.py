"""mkdocs hook: write the generated reference pages (shipyard._docs) before each build.

They are read off the code (the argument parser, the manifest model, the table of
environment variables, the error and output types), so the site never describes a
flag, key or variable the code does not have. Only pages whose text changed are
written, so `mkdocs serve` does not rebuild in a loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def on_pre_build(config: Any) -> None:
    """Write docs/reference/*.md from the code."""
    from shipyard._docs import write

    write(Path(config["docs_dir"]))
