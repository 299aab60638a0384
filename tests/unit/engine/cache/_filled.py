"""A cache folder with every part filled, each file's size and last use known."""

from __future__ import annotations

import os
import time
from pathlib import Path

from shipyard._fs import sha256_file
from shipyard.artifacts import Artifact
from shipyard.engine.cache.local import ActionCache

__all__ = ["HEX", "HOUR", "Filled", "aged", "blob", "files", "size"]

HOUR = 3600.0
NOW = time.time()


def aged(path: Path, hours_ago: float) -> Path:
    when = NOW - hours_ago * HOUR
    os.utime(path, (when, when))
    return path


def blob(folder: Path, name: str, size: int, hours_ago: float) -> Path:
    """A base blob (or any file) of `size` random bytes, last used `hours_ago`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(os.urandom(size))
    return aged(path, hours_ago)


def entry(cache: ActionCache, key: str, outputs: dict[str, int], hours_ago: float) -> Path:
    """An action entry storing files named `outputs` (name -> size; the same name and
    size is the same blob), last used `hours_ago`."""
    made = []
    for name, size in outputs.items():
        out = cache.dir.parent / "outputs" / name
        out.parent.mkdir(parents=True, exist_ok=True)
        if not out.exists():
            out.write_bytes(os.urandom(size))
        made.append(Artifact("wheel", "", "any", out, sha256_file(out), size))
    cache.store(key, tuple(made), cache.dir.parent)
    return aged(cache.actions / f"{key}.json", hours_ago)


def sha(cache: ActionCache, name: str) -> str:
    return sha256_file(cache.dir.parent / "outputs" / name)


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != ".lock"}


def size(paths: list[Path]) -> int:
    return sum(p.stat().st_size for p in paths)


HEX = ("a" * 64, "b" * 64, "c" * 64)


class Filled:
    """A cache with every part, each file's size and last use known:

    oldest first: base blob A (3 h), entry E1 (2.5 h; its own blob and one E2
    shares), base blob B (2 h), manifest M (1 h), entry E2 (0.5 h); and a
    zipapps/ folder, which is not the build cache.
    """

    def __init__(self, root: Path) -> None:
        self.cache = ActionCache(root)
        oci = root / "oci" / "sha256"
        self.a = blob(oci, HEX[0], 40_000, 3)
        self.e1 = entry(self.cache, "e1", {"own.whl": 20_000, "shared.whl": 10_000}, 2.5)
        self.b = blob(oci, HEX[1], 30_000, 2)
        self.m = blob(root / "manifests", "m.json", 5_000, 1)
        self.e2 = entry(self.cache, "e2", {"shared.whl": 10_000, "new.whl": 7_000}, 0.5)
        self.zipapps = blob(root / "zipapps" / "build", "native.so", 50_000, 10)
        blobs = self.cache.blobs
        own, shared, new = (
            blobs / sha(self.cache, n) for n in ("own.whl", "shared.whl", "new.whl")
        )
        # What removing each unit frees, in LRU order: E1 frees its own blob only.
        self.units: list[tuple[str, list[Path]]] = [
            ("A", [self.a]),
            ("E1", [self.e1, own]),
            ("B", [self.b]),
            ("M", [self.m]),
            ("E2", [self.e2, shared, new]),
        ]
        self.sizes = [size(paths) for _, paths in self.units]
        self.cache.close()  # the builds that filled it are over
