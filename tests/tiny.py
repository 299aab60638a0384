"""A tiny repository of one-module binaries, each on its own `image.base`, and the CLI on it.

Shared by the tests of the `image.base` forms (unit: files on disk) and of the base
media types (integration: bases in the local registry). Builds run offline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

VERSION = "1.0.0"
GREETING = "tiny says hi"
OFFLINE = {"UV_OFFLINE": "1", "PIP_NO_INDEX": "1"}


def make_repo(folder: Path, bases: Mapping[str, tuple[str, Sequence[str]]]) -> Path:
    """A git repository whose binaries.yaml has one binary per name: (base, platforms)."""
    package = folder / "tiny" / "tiny"
    package.mkdir(parents=True)
    (folder / "tiny" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        f'[project]\nname = "tiny"\nversion = "{VERSION}"\n'
    )
    (package / "__init__.py").write_text(f"def main() -> None:\n    print({GREETING!r})\n")
    lines = [
        "schema: 1",
        f'project: {{name: tiny, version: "{VERSION}", python: "3.11"}}',
        "binaries:",
    ]
    for name, (base, platforms) in bases.items():
        lines += [
            f"  {name}:",
            "    source: tiny",
            '    entrypoint: "tiny:main"',
            "    outputs: [wheel, image]",
            f"    platforms: [{', '.join(platforms)}]",
            f"    image: {{base: {json.dumps(base)}}}",
        ]
    (folder / "binaries.yaml").write_text("\n".join(lines) + "\n")
    (folder / ".gitignore").write_text("/dist/\n")
    git = ["git", "-C", str(folder), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    return folder


def shipyard(
    folder: Path, *args: str, cache: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m shipyard ARGS` in `folder`, plain output, offline, with its own cache."""
    return subprocess.run(
        [sys.executable, "-m", "shipyard", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "CI": "1", "SHIPYARD_CACHE_DIR": str(cache), **OFFLINE, **(env or {})},
        check=False,
    )
