"""Dependency confusion through extras, end to end through the CLI (security issue, item 4).

A uv workspace (members written by hand, no uv.lock) holds an app `acme-app` whose extra
`plus` needs the library `acme-extra`, a member of the same workspace; the binary asks for
`extras: [plus]`. The "index" (a find-links folder the installer searches, offline) also
offers an `acme-extra` 99.0: the attacker's copy, a higher version of the same name. The
zipapp must ship the repository's copy, and `affected` must name the binary when that
library changes. Build backends come from the installer's cache, offline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from shipyard.builders.zipapp import _boot as boot
from tests.unit.test_resolve import make_wheel

pytestmark = pytest.mark.integration

PLATFORM = "linux/arm64" if os.uname().machine in ("aarch64", "arm64") else "linux/amd64"
BACKEND = '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
APP = f"""{BACKEND}[project]
name = "acme-app"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = []

[project.optional-dependencies]
plus = ["acme-extra"]

[tool.uv.sources]
acme-extra = {{ workspace = true }}
"""
EXTRA = f'{BACKEND}[project]\nname = "acme-extra"\nversion = "0.1.0"\nrequires-python = ">=3.11"\n'
MAIN = "import acme_extra\n\n\ndef main() -> None:\n    print(acme_extra.WHO)\n"
MANIFEST = f"""\
schema: 1
project: {{name: acme, version: "1.0.0", python: "3.11"}}
binaries:
  acme-app:
    source: apps/app
    entrypoint: acme_app:main
    extras: [plus]
    outputs: [zipapp]
    platforms: [{PLATFORM}]
"""


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _env(tmp: Path, links: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_", "GIT_"))}
    return {
        **env,
        "UV_OFFLINE": "1",  # the default index from the cache only (build backends)
        "PIP_NO_INDEX": "1",
        "UV_FIND_LINKS": str(links),  # where the attacker's acme-extra is offered
        "PIP_FIND_LINKS": str(links),
        "UV_NO_CONFIG": "1",
        "SHIPYARD_CACHE_DIR": str(tmp / "cache"),
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t.invalid",
        "CI": "1",
    }


def _run(root: Path, env: dict[str, str], *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=root, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def test_a_library_reached_through_an_extra_ships_from_the_repository(tmp_path: Path) -> None:
    """Bug: the zipapp shipped the index's acme-extra 99.0, and editing the repository's
    acme-extra affected no binary."""
    links = tmp_path / "index"
    make_wheel(links, "acme_extra", "99.0", files={"acme_extra/__init__.py": "WHO = 'index'\n"})
    root = tmp_path / "repo"
    _write(root / "pyproject.toml", '[tool.uv.workspace]\nmembers = ["apps/*", "libs/*"]\n')
    _write(root / "apps/app/pyproject.toml", APP)
    _write(root / "apps/app/acme_app/__init__.py", MAIN)
    _write(root / "libs/extra/pyproject.toml", EXTRA)
    _write(root / "libs/extra/acme_extra/__init__.py", "WHO = 'repository'\n")
    _write(root / "binaries.yaml", MANIFEST)
    _write(root / ".gitignore", "/dist/\n")
    env = _env(tmp_path, links)
    for git in (("init", "-q"), ("add", "-A"), ("commit", "-qm", "one")):
        assert _run(root, env, "git", *git).returncode == 0

    built = _run(root, env, sys.executable, "-m", "shipyard", "build")
    assert built.returncode == 0, built.stderr[-4000:]
    (pyz,) = sorted((root / "dist" / "zipapps").glob("acme-app-*.pyz"))
    with zipfile.ZipFile(pyz) as archive:
        assert archive.read("site/acme_extra/__init__.py") == b"WHO = 'repository'\n"
        info = json.loads(archive.read(boot.BUILD_INFO))
    assert info["distributions"]["acme-extra"] == "0.1.0", info["distributions"]
    ran = _run(
        tmp_path, {**env, boot.ROOT_ENV: str(tmp_path / "unpacked")}, sys.executable, str(pyz)
    )
    assert (ran.returncode, ran.stdout) == (0, "repository\n"), ran.stderr

    _write(root / "libs/extra/acme_extra/__init__.py", "WHO = 'repository, edited'\n")
    assert _run(root, env, "git", "commit", "-qam", "edit the library").returncode == 0
    found = _run(root, env, sys.executable, "-m", "shipyard", "affected", "--since=HEAD~1")
    assert found.returncode == 0, found.stderr[-2000:]
    assert found.stdout == (
        "acme-app: libs/extra/acme_extra/__init__.py changed (through acme-extra)\n"
    )
