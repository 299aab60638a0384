"""The files a source folder is made of, and the hash of them that keys its actions."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

__all__ = ["source_files", "tree_hash"]

# Never inputs: VCS data, caches and build droppings that change on every run.
_IGNORED_DIRS = frozenset(
    {
        ".git",
        "__pycache__",
        ".venv",
        "venv",
        ".nox",
        ".tox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        "build",
        "dist",
        ".shipyard",
    }
)


def _git_files(source: Path) -> list[Path] | None:
    try:
        done = subprocess.run(
            [
                "git",
                "-C",
                str(source),
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
                "--",
                ".",
            ],
            capture_output=True,
            check=False,
        )
    except OSError:
        return None
    if done.returncode != 0:
        return None
    names = sorted({n for n in done.stdout.decode().split("\0") if n})
    return [source / n for n in names if (source / n).is_file()]


def source_files(source: Path) -> list[Path]:
    """The files of `source`, sorted: what git tracks or would track, else a filtered walk."""
    found = _git_files(source)
    if found is not None:
        return [p for p in found if not _IGNORED_DIRS.intersection(p.relative_to(source).parts)]
    files: list[Path] = []
    for folder, dirs, names in os.walk(source):
        dirs[:] = sorted(d for d in dirs if d not in _IGNORED_DIRS and not d.endswith(".egg-info"))
        files.extend(Path(folder) / n for n in sorted(names) if not n.endswith(".pyc"))
    return sorted(files)


def tree_hash(source: Path, *extra: str, exclude: tuple[Path, ...] = ()) -> str:
    """sha256 over the relative names, modes and contents of `source`'s files plus `extra`.

    Files under any folder in `exclude` are left out.
    """
    digest = hashlib.sha256()
    for part in extra:
        digest.update(part.encode() + b"\0")
    for path in source_files(source):
        if any(path.is_relative_to(folder) for folder in exclude):
            continue
        digest.update(path.relative_to(source).as_posix().encode() + b"\0")
        digest.update(b"x" if os.access(path, os.X_OK) else b"-")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()
