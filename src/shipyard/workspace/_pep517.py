"""Run in a subprocess: ask each project's PEP 517 backend for its core metadata.

`python -m shipyard.workspace._pep517 REQUEST.json ANSWER.json`, where the request is
`{"sources": [folder, ...]}` and the answer maps each folder to `{"metadata": text,
"entry_points": text}` or `{"error": text}`. The backend's `prepare_metadata_for_build_wheel`
runs (`build` falls back to a wheel build when a backend lacks it) in an isolated
environment holding the project's build requirements; projects that declare the same
`[build-system].requires` share one environment, so twenty hatchling members install
hatchling once. Kept out of shipyard's own process: a backend is foreign code that may
print, change the working directory or leave threads behind, and the environment it
sees is the one the caller chose.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any


def _requires(source: Path) -> tuple[str, ...]:
    try:
        data = tomllib.loads((source / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return ()
    table = data.get("build-system")
    listed = table.get("requires") if isinstance(table, dict) else None
    return tuple(sorted(str(r) for r in listed)) if isinstance(listed, list) else ()


def _installer() -> str:
    try:
        from uv import find_uv_bin

        find_uv_bin()
    except (ImportError, FileNotFoundError):
        return "uv" if shutil.which("uv") else "pip"
    return "uv"


def _tail(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-12:])


def _one(builder: Any, env: Any, out: Path) -> dict[str, str]:
    env.install(builder.get_requires_for_build("wheel"))
    dist_info = Path(builder.metadata_path(out))
    entry_points = dist_info / "entry_points.txt"
    return {
        "metadata": (dist_info / "METADATA").read_text(encoding="utf-8"),
        "entry_points": entry_points.read_text(encoding="utf-8") if entry_points.is_file() else "",
    }


class _Recent(logging.Handler):
    """The last lines `build` logged (the installer's output among them)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines = [*self.lines, *record.getMessage().splitlines()][-12:]


def main(argv: list[str]) -> int:
    """Answer the request file argv[0] into argv[1]; exit 0 even when projects fail."""
    from build import BuildBackendException, BuildException, ProjectBuilder
    from build.env import DefaultIsolatedEnv

    recent = _Recent()
    logging.getLogger("build").addHandler(recent)
    logging.getLogger("build").setLevel(logging.INFO)

    request = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    groups: dict[tuple[str, ...], list[Path]] = {}
    for folder in request["sources"]:
        groups.setdefault(_requires(Path(folder)), []).append(Path(folder))
    answer: dict[str, dict[str, str]] = {}
    installer = _installer()
    with tempfile.TemporaryDirectory(prefix="shipyard-metadata-") as scratch:
        for number, (requires, folders) in enumerate(sorted(groups.items())):
            try:
                with DefaultIsolatedEnv(installer=installer) as env:  # type: ignore[arg-type]
                    env.install(requires)
                    for index, folder in enumerate(folders):
                        out = Path(scratch) / f"{number}-{index}"
                        out.mkdir()
                        try:
                            builder = ProjectBuilder.from_isolated_env(env, folder)
                            answer[str(folder)] = _one(builder, env, out)
                        except (BuildException, BuildBackendException, OSError) as error:
                            answer[str(folder)] = {"error": _tail(error)}
            except (BuildException, BuildBackendException, OSError) as error:
                for folder in folders:
                    answer.setdefault(str(folder), {"error": _tail(error)})
            except Exception as error:
                said = "\n".join(recent.lines) or _tail(error)
                for folder in folders:
                    answer.setdefault(
                        str(folder),
                        {"error": f"installing the build requirements failed: {said}"},
                    )
    Path(argv[1]).write_text(json.dumps(answer), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
