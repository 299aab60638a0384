"""Real uv workspaces for the tests of shipyard.workspace: tiny wheels, a file:// index of
them (with hashes, so uv.lock pins them), and uv run offline against it."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from tests.unit.builders.test_resolve import make_wheel as wheel_of

UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
needs_uv = pytest.mark.skipif(UV is None, reason="uv is not installed")


def make_wheel(
    folder: Path,
    name: str,
    version: str,
    requires: Sequence[str] = (),
    extras: Mapping[str, Sequence[str]] | None = None,
) -> Path:
    """A minimal pure-Python wheel whose module holds VERSION."""
    module = {f"{name}/__init__.py": f"VERSION = {version!r}\n"}
    return wheel_of(folder, name, version, files=module, requires=requires, extras=extras)


@dataclass
class Index:
    """A folder of wheels and a PEP 503 file:// index of them with sha256 fragments."""

    folder: Path

    @property
    def wheels(self) -> Path:
        return self.folder / "wheels"

    @property
    def url(self) -> str:
        return (self.folder / "simple").as_uri()

    def add(
        self, name: str, version: str, requires: Sequence[str] = (), **extras: list[str]
    ) -> None:
        make_wheel(self.wheels, name, version, requires, extras)
        self.refresh()

    def refresh(self) -> None:
        simple = self.folder / "simple"
        simple.mkdir(parents=True, exist_ok=True)
        by_name: dict[str, list[Path]] = {}
        files = [*self.wheels.glob("*.whl"), *self.wheels.glob("*.tar.gz")]  # sdists too
        for wheel in sorted(files):
            by_name.setdefault(canonicalize_name(wheel.name.split("-")[0]), []).append(wheel)
        for name, wheels in by_name.items():
            (simple / name).mkdir(parents=True, exist_ok=True)
            links = "".join(
                f'<a href="{w.as_uri()}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">'
                f"{w.name}</a>\n"
                for w in wheels
            )
            (simple / name / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
        (simple / "index.html").write_text(
            "<html><body>" + "".join(f'<a href="{n}/">{n}</a>' for n in by_name) + "</body></html>"
        )


def standard_index(folder: Path) -> Index:
    """alpha 1.0, beta 1.0 (needs gamma), gamma 1.0, delta 1.0 (extra `fast`: epsilon),
    epsilon 1.0. No alpha 2.0 yet: tests add it after locking."""
    index = Index(folder)
    index.add("alpha", "1.0")
    index.add("beta", "1.0", ["gamma>=1"])
    index.add("gamma", "1.0")
    index.add("delta", "1.0", fast=["epsilon"])
    index.add("epsilon", "1.0")
    return index


def uv_env(index: Index, cache: Path) -> dict[str, str]:
    """uv offline against `index` only, with its own cache and this interpreter."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    return {
        **env,
        "UV_OFFLINE": "1",
        "UV_INDEX_URL": index.url,
        "UV_CACHE_DIR": str(cache),
        "UV_PYTHON": sys.executable,
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NO_CONFIG": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t.invalid",
    }


@dataclass
class Uv:
    """The real uv binary run in a folder, offline against an Index."""

    index: Index
    cache: Path

    def __call__(
        self, cwd: Path, *args: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        assert UV is not None
        done = subprocess.run(
            [UV, *args],
            cwd=cwd,
            env=uv_env(self.index, self.cache),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"uv {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done

    def lock_is_fresh(self, root: Path) -> bool:
        """What `uv lock --check --offline` says about root/uv.lock."""
        return self(root, "lock", "--check", "--offline", check=False).returncode == 0


def uv_workspace(root: Path, uv: Uv) -> Path:
    """A workspace the way a user makes one with uv: a virtual root listing `libs/*` and
    `apps/*`; `acme-common` (a library needing beta) and `acme-tool` (an app needing
    acme-common, alpha and delta[fast], with a dev group needing beta); then `uv lock`."""
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        '[tool.uv.workspace]\nmembers = [\n    "libs/*",\n    "apps/*",\n]\n'
    )
    uv(root, "init", "--lib", "--vcs", "none", "--name", "acme-common", "libs/common")
    uv(root, "init", "--package", "--vcs", "none", "--name", "acme-tool", "apps/tool")
    uv(root / "libs/common", "add", "--no-sync", "beta")
    tool = root / "apps/tool"
    uv(tool, "add", "--no-sync", "acme-common", "alpha", "delta[fast]")
    uv(tool, "add", "--no-sync", "--dev", "beta")
    return root
