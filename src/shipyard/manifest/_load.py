"""Loading binaries.yaml, with a cache that skips validation for an unchanged file.

Validation (pydantic, positions, references) costs a few hundred milliseconds of
imports alone; a no-op build should cost less than that in total. The cache key
covers the manifest's bytes, the values of the variables it references, and the
code that validates it; the file-system facts validation checked (each source has
a pyproject.toml, each lock file holds only pinned requirements) are checked again
on a hit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from shipyard._fs import atomic_write
from shipyard.errors import UsageError
from shipyard.manifest._cached import manifest_from_json, manifest_to_json
from shipyard.manifest._lock import lock_problems
from shipyard.manifest._types import Manifest

__all__ = ["load_manifest"]

_VARIABLE = re.compile(rb"\$\{([A-Za-z_][A-Za-z0-9_]*)")
_CODE = Path(__file__).parent


def _key(path: Path, data: bytes, env: Mapping[str, str]) -> str:
    digest = hashlib.sha256(str(path).encode() + b"\0" + data)
    for name in sorted({m.decode() for m in _VARIABLE.findall(data)}):
        value = env.get(name)
        digest.update(f"\0{name}={'' if value is None else value}{value is None}".encode())
    for module in sorted(_CODE.glob("*.py")):
        digest.update(module.read_bytes())
    return digest.hexdigest()


def _still_valid(manifest: Manifest) -> bool:
    for binary in manifest.binaries.values():
        if not (binary.source / "pyproject.toml").is_file():
            return False
        # A lock file is not part of the key: read it again (a full load reports it).
        lock = binary.requirements
        if lock is not None and (not lock.is_file() or lock_problems(lock, "")):
            return False
    return True


def load_manifest(
    path: Path, env: Mapping[str, str] | None = None, *, cache_dir: Path | None = None
) -> Manifest:
    """Read, expand and validate the manifest at `path`; raise ManifestError listing problems.

    With `cache_dir`, a manifest validated before with the same inputs is read
    back from there instead.
    """
    path = path.resolve()
    env = os.environ if env is None else env
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the manifest: {exc.strerror}") from None
    entry = cache_dir / "manifests" / f"{_key(path, data, env)}.json" if cache_dir else None
    if entry is not None and entry.is_file():
        try:
            cached = manifest_from_json(json.loads(entry.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            cached = None
        if cached is not None and _still_valid(cached):
            return cached
    from shipyard.manifest._validate import validate

    manifest = validate(path, data, env)
    if entry is not None:
        atomic_write(entry, json.dumps(manifest_to_json(manifest)).encode())
    return manifest
