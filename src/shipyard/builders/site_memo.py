"""Resolved sites shared by the outputs of one binary: one resolution per platform.

A binary's zipapp and its image each install the same wheels, from the same lock, for
the same platform and Python: the same site. The first output to resolve keeps a copy
of its site (hard links where the file system allows) in a folder of this process, by
the key of everything that decides it (`site_key`); the second output's resolve is a
lookup that links the kept site into its own folder. A failed resolution is not kept,
and neither is a site the kept folder cannot hard-link (another file system: a copy
would hold a second site's bytes, in memory where the temporary folder is a tmpfs).
The kept sites are removed when the process ends (a killed build leaves them in dist/, where
the next build sweeps them).

The key holds the wheels' bytes, the platform and Python, the lock's bytes (or none),
the extras and the installer's whole environment (its index settings among them). What
it cannot hold is the index's state: as the action keys, it takes the index's answer
for the same inputs to be the same within one process.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard._fs import TEMP_PREFIX, sha256_file

if TYPE_CHECKING:
    from shipyard.builders.resolve import Resolution

__all__ = ["SiteMemo", "copy_site", "site_key"]


def site_key(
    wheels: Sequence[Path],
    platform: str,
    python: str,
    lock: Mapping[str, object] | None,
    extras: Sequence[str],
    env: Mapping[str, str],
) -> str:
    """The sha256 of what decides a resolved site: the first wheel's name and bytes and
    the others' (in any order), `platform`, `python`, `lock` (a description of the lock's
    bytes), `extras` (in any order) and the installer's environment `env`."""
    own, *others = ([w.name, sha256_file(w)] for w in wheels)
    data = {
        "wheels": [own, sorted(others)],
        "platform": platform,
        "python": python,
        "lock": lock,
        "extras": sorted(extras),
        "env": dict(sorted(env.items())),
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def copy_site(source: Path, dest: Path, *, links_only: bool = False) -> None:
    """`source`'s files in `dest` (made): hard links where the file system allows (the
    installer's own files are links into its cache already; nothing writes a site's
    file in place), else copies, or OSError with `links_only`. Symbolic links are
    copied as links."""
    dest.mkdir(parents=True, exist_ok=True)
    for folder, dirs, files in os.walk(source):
        here = Path(folder)
        there = dest / here.relative_to(source)
        for name in dirs:
            if (here / name).is_symlink():
                (there / name).symlink_to(os.readlink(here / name))
            else:
                (there / name).mkdir(exist_ok=True)
        dirs[:] = [d for d in dirs if not (here / d).is_symlink()]
        for name in files:
            path = here / name
            if path.is_symlink():
                (there / name).symlink_to(os.readlink(path))
                continue
            try:
                os.link(path, there / name)
            except OSError:
                if links_only:
                    raise
                shutil.copy2(path, there / name)


def _swept_folder(dest: Path) -> Path | None:
    """Where a process's kept sites go: beside the build's own temporary folder that
    holds `dest` (in dist/, where the next build sweeps `.tmp-*` a killed build left,
    on the file system of the sites it links), else the system's temporary folder."""
    for folder in dest.absolute().parents:
        if folder.name.startswith(TEMP_PREFIX) and not folder.parent.name.startswith(TEMP_PREFIX):
            return folder.parent
    return None


@dataclass
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    resolution: Resolution | None = None


class SiteMemo:
    """Sites resolved in this process, by `site_key`, each kept in a folder of `root`
    (made on first use beside the first build's temporary folder, in dist/, or in the
    system's temporary folder; removed at exit, and swept by the next build when a
    kill left it)."""

    def __init__(self, root: Path | None = None) -> None:
        self._root = root
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()
        self.resolved = 0  # sites resolved, not looked up: what the tests count

    def _folder(self, near: Path) -> Path:
        with self._lock:
            if self._root is None:
                home = _swept_folder(near)
                self._root = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}sites-", dir=home))
                atexit.register(shutil.rmtree, self._root, ignore_errors=True)
            return self._root

    def site(
        self, key: str, dest: Path, resolve: Callable[[], Resolution]
    ) -> tuple[Resolution, bool]:
        """The resolution of `key` with its site in `dest`: `resolve()`'s (which
        installs into `dest`), or, when this key was resolved before, the earlier one
        with the kept site linked into `dest`; and whether it was looked up. Resolves
        of one key take turns; resolves of different keys run at once."""
        with self._lock:
            entry = self._entries.setdefault(key, _Entry())
        with entry.lock:
            earlier = entry.resolution
            kept = self._folder(dest) / key
            if earlier is not None and kept.is_dir():
                shutil.rmtree(dest, ignore_errors=True)
                copy_site(kept, dest)
                return replace(earlier, site=dest), True
            resolution = resolve()
            self.resolved += 1
            shutil.rmtree(kept, ignore_errors=True)
            try:
                copy_site(resolution.site, kept, links_only=True)
            except OSError:
                shutil.rmtree(kept, ignore_errors=True)  # not kept: resolved again later
            else:
                entry.resolution = resolution
            return resolution, False

    def forget(self) -> None:
        """Drop every kept site (a later resolve of any key resolves again)."""
        with self._lock:
            entries, self._entries = self._entries, {}
        if self._root is not None:
            for key in entries:
                shutil.rmtree(self._root / key, ignore_errors=True)
