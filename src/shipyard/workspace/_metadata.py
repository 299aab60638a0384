"""A project's real core metadata, from its PEP 517 backend, cached by the project's inputs.

A project whose `[project].dynamic` names its dependencies or extras (a hatch metadata
hook, setuptools' `file:` directives, a version plugin that pins sibling members) has
requirements only its backend can tell. With no uv.lock recording them, shipyard asks the
backend (`prepare_metadata_for_build_wheel`, in an isolated environment; see `_pep517`)
and remembers the answer under the shipyard cache folder, keyed by the hash of the
project's files (its source tree, nested projects left out), the build requirements and
the Python that asked: an unchanged project is never asked twice, and a warm read costs
one stat per file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from shipyard._fs import atomic_write

__all__ = ["CoreMetadata", "MetadataError", "read_metadata"]

_FORMAT = "shipyard-metadata-1"


@dataclass(frozen=True)
class CoreMetadata:
    """What a project's METADATA and entry_points.txt say, as the backend wrote them."""

    name: str
    version: str
    requires_dist: tuple[str, ...]
    provides_extra: tuple[str, ...]
    scripts: tuple[tuple[str, str], ...] = ()
    gui_scripts: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, metadata: str, entry_points: str = "") -> CoreMetadata:
        """From the text of METADATA and of entry_points.txt."""
        import email.parser  # here: a build that asks no backend never loads these
        from configparser import ConfigParser
        from configparser import Error as ConfigError

        message = email.parser.HeaderParser().parsestr(metadata)
        sections: dict[str, tuple[tuple[str, str], ...]] = {}
        if entry_points.strip():
            parser = ConfigParser(delimiters=("=",), interpolation=None)
            parser.optionxform = str  # type: ignore[assignment,method-assign]
            try:
                parser.read_string(entry_points)
            except ConfigError:
                parser = ConfigParser()
            for section in ("console_scripts", "gui_scripts"):
                if parser.has_section(section):
                    sections[section] = tuple(
                        sorted((k, v.strip()) for k, v in parser.items(section))
                    )
        return cls(
            name=str(message.get("Name", "")),
            version=str(message.get("Version", "")),
            requires_dist=tuple(str(v) for v in message.get_all("Requires-Dist") or ()),
            provides_extra=tuple(str(v) for v in message.get_all("Provides-Extra") or ()),
            scripts=sections.get("console_scripts", ()),
            gui_scripts=sections.get("gui_scripts", ()),
        )


@dataclass(frozen=True)
class MetadataError:
    """The backend could not give a project's metadata: why, in its own words."""

    problem: str


def _key(digest: str) -> str:
    text = json.dumps([_FORMAT, sys.version_info[:2], digest], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def read_metadata(
    digests: Mapping[Path, str],
    *,
    cache_dir: Path | None,
    env: Mapping[str, str] | None = None,
    timeout: float = 900.0,
) -> dict[Path, CoreMetadata | MetadataError]:
    """The core metadata of each project folder in `digests` (folder -> hash of its
    inputs), from the cache where it is, else from one backend run for all the rest.

    `cache_dir` is the folder of the answers (None: nothing cached); `env` the
    environment the backends run in (default: this process's). An answer is cached only
    when the backend gave one; a failure is asked again next time."""
    found: dict[Path, CoreMetadata | MetadataError] = {}
    todo: list[Path] = []
    for folder, digest in sorted(digests.items()):
        cached = _load(cache_dir, _key(digest)) if cache_dir else None
        if cached is not None:
            found[folder] = cached
        else:
            todo.append(folder)
    if not todo:
        return found
    answers = _ask(todo, env, timeout)
    for folder in todo:
        answer = answers.get(str(folder))
        if answer is None:
            found[folder] = MetadataError("the metadata run gave no answer for it")
        elif "error" in answer:
            found[folder] = MetadataError(answer["error"])
        else:
            found[folder] = CoreMetadata.parse(answer["metadata"], answer.get("entry_points", ""))
            if cache_dir is not None:
                _store(cache_dir, _key(digests[folder]), answer)
    return found


def _ask(
    folders: Sequence[Path], env: Mapping[str, str] | None, timeout: float
) -> dict[str, dict[str, str]]:
    with tempfile.TemporaryDirectory(prefix="shipyard-metadata-") as tmp:
        request, answer = Path(tmp) / "request.json", Path(tmp) / "answer.json"
        request.write_text(json.dumps({"sources": [str(f) for f in folders]}), encoding="utf-8")
        scratch = Path(tmp) / "tmp"
        scratch.mkdir()
        command = [sys.executable, "-m", "shipyard.workspace._pep517", str(request), str(answer)]
        environ = {**(os.environ if env is None else env), "TMPDIR": str(scratch)}
        try:
            done = subprocess.run(
                command, cwd=tmp, env=environ, capture_output=True, text=True,
                timeout=timeout, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            problem = f"the PEP 517 backends gave no metadata within {timeout:.0f} s"
            return {str(f): {"error": problem} for f in folders}
        if done.returncode != 0 or not answer.is_file():
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-12:])
            problem = f"the metadata run failed (exit {done.returncode}): {tail}"
            return {str(f): {"error": problem} for f in folders}
        loaded = json.loads(answer.read_text(encoding="utf-8"))
        return loaded if isinstance(loaded, dict) else {}


def _entry(cache_dir: Path, key: str) -> Path:
    return cache_dir / f"{key}.json"


def _load(cache_dir: Path, key: str) -> CoreMetadata | None:
    try:
        data = json.loads(_entry(cache_dir, key).read_text(encoding="utf-8"))
        return CoreMetadata.parse(str(data["metadata"]), str(data.get("entry_points", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _store(cache_dir: Path, key: str, answer: Mapping[str, str]) -> None:
    path = _entry(cache_dir, key)
    with contextlib.suppress(OSError):  # unwritable: a backend run next time, nothing more
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(dict(answer), sort_keys=True).encode())
