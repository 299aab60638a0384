"""A uv workspace from zero to images, through the CLI: in-repo libraries, uv.lock,
per-binary versions, `--since` and layers (issue 14).

The workspace is made with the real uv (`uv init`, `uv add`, `uv lock`) and git:
a library `acme-common`, an app `acme-tool` that needs it, and an app `acme-other`
that does not. Third-party code is one tiny package, `shipyardtestdep`, served by
a file:// index (with hashes, so the lock pins it); version 1.0 is locked, then
2.0 appears in the index, and 1.0 is what must ship. Build backends come the
usual way (the installer's cache or index). Images run with `--network none`,
arm64 under QEMU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from shipyard.oci.layout import read_layout
from shipyard.oci.model import Platform
from tests.integration._images import tarball
from tests.integration.conftest import Services
from tests.unit._workspaces import UV, Index

pytestmark = [pytest.mark.integration, pytest.mark.skipif(UV is None, reason="needs uv")]

DEP = "shipyardtestdep"
PLATFORMS = ("linux/amd64", "linux/arm64")
TOOL = """\
import importlib.metadata
import platform

import acme_common
import {dep}


def main() -> int:
    print(acme_common.greeting(), "{dep}", {dep}.VERSION, platform.machine(){edit})
    return 0
"""
OTHER = """\
import {dep}


def main() -> int:
    print("other", "{dep}", {dep}.VERSION)
    return 0
"""
COMMON = 'def greeting() -> str:\n    return "common {word}"\n'
MANIFEST = """\
schema: 1
project: {{name: acme, version: git, python: "3.11"}}
defaults:
  platforms: [linux/amd64, linux/arm64]
  image: {{base: "oci-layout:{base}"}}
binaries:
  acme-tool:
    source: apps/tool
    entrypoint: acme_tool:main
    outputs: [wheel, zipapp, image]
  acme-other:
    source: apps/other
    entrypoint: acme_other:main
    outputs: [wheel, zipapp]
"""


@dataclass
class Workspace:
    root: Path
    index: Index
    env: dict[str, str]

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "shipyard", *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if check:
            assert done.returncode == 0, f"shipyard {' '.join(args)}:\n{done.stderr[-4000:]}"
        return done

    def git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=self.root, env=self.env, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    def uv(self, cwd: Path, *args: str) -> None:
        assert UV is not None
        done = subprocess.run(
            [UV, *args],
            cwd=cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, f"uv {' '.join(args)}:\n{done.stdout}{done.stderr}"

    def commit(self, message: str) -> None:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)

    def report(self) -> dict[str, dict[str, object]]:
        data = json.loads((self.root / "dist" / "report.json").read_text())
        return {a["id"]: a for a in data["actions"]}

    def zipapp(self, binary: str) -> str:
        found = sorted((self.root / "dist" / "zipapps").glob(f"{binary}-*.pyz"))
        host = "linux_amd64" if os.uname().machine in ("x86_64", "amd64") else "linux_arm64"
        chosen = [p for p in found if host in p.name] or found
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        done = subprocess.run(
            [sys.executable, str(chosen[-1])], env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()


def _write_app(folder: Path, package: str, code: str) -> None:
    (folder / "src" / package).mkdir(parents=True, exist_ok=True)
    (folder / "src" / package / "__init__.py").write_text(code)


@pytest.fixture(scope="module")
def ws(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    top = tmp_path_factory.mktemp("workspace")
    index = Index(top / "index")
    index.add(DEP, "1.0")
    root = top / "repo"
    root.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    env.update(
        UV_EXTRA_INDEX_URL=index.url,  # searched first: the package is only there
        UV_CACHE_DIR=str(top / "uv-cache"),
        UV_PYTHON=sys.executable,
        UV_PYTHON_DOWNLOADS="never",
        UV_NO_CONFIG="1",
        SHIPYARD_CACHE_DIR=str(top / "cache"),
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@t.invalid",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@t.invalid",
        CI="1",
    )
    w = Workspace(root, index, env)
    (root / "pyproject.toml").write_text('[tool.uv.workspace]\nmembers = ["libs/*", "apps/*"]\n')
    for kind, name, folder in (
        ("--lib", "acme-common", "libs/common"),
        ("--package", "acme-tool", "apps/tool"),
        ("--package", "acme-other", "apps/other"),
    ):
        w.uv(
            root,
            "init",
            kind,
            "--vcs",
            "none",
            "--build-backend",
            "hatchling",
            "--name",
            name,
            folder,
        )
    (root / "libs/common/src/acme_common/__init__.py").write_text(COMMON.format(word="v1"))
    w.uv(root / "libs/common", "add", "--no-sync", DEP)
    w.uv(root / "apps/tool", "add", "--no-sync", "acme-common")
    w.uv(root / "apps/other", "add", "--no-sync", DEP)
    _write_app(root / "apps/tool", "acme_tool", TOOL.format(dep=DEP, edit=""))
    _write_app(root / "apps/other", "acme_other", OTHER.format(dep=DEP))
    w.uv(root, "lock")
    assert f'name = "{DEP}"\nversion = "1.0"' in (root / "uv.lock").read_text()
    index.add(DEP, "2.0")  # the index moves on; the lock does not
    (root / "binaries.yaml").write_text(MANIFEST.format(base=services.base_layout))
    (root / ".gitignore").write_text("/dist/\n")
    w.git("init", "-q")
    w.commit("a workspace")
    yield w
    shutil.rmtree(top, ignore_errors=True)


@pytest.mark.requires("base-layout")
def test_libraries_and_the_locked_versions_ship(ws: Workspace) -> None:
    assert "up to date" in ws.run("check").stdout
    plan = json.loads(ws.run("plan", "--json").stdout)
    actions = {a["id"]: a for a in plan["actions"]}
    assert actions["zipapp:acme-tool"]["deps"] == ["wheel:apps/tool", "wheel:libs/common"]
    assert actions["zipapp:acme-other"]["deps"] == ["wheel:apps/other"]
    assert [a for a in actions if a.startswith("wheel:libs/")] == ["wheel:libs/common"]
    ws.run("build")
    assert ws.zipapp("acme-tool").startswith(f"common v1 {DEP} 1.0 ")
    assert ws.zipapp("acme-other") == f"other {DEP} 1.0"


@pytest.mark.requires("base-layout", "docker", "qemu-aarch64")
def test_the_images_run_on_both_platforms(ws: Workspace) -> None:
    for platform in PLATFORMS:
        archive = tarball(ws.root / "dist", "acme-tool", platform)
        loaded = subprocess.run(
            ["docker", "load", "-i", str(archive)], capture_output=True, text=True, check=True
        )
        tag = loaded.stdout.strip().rpartition("Loaded image: ")[2]
        done = subprocess.run(
            ["docker", "run", "--rm", "--network", "none", "--platform", platform, tag],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        machine = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}[platform]
        assert done.stdout.split() == ["common", "v1", DEP, "1.0", machine]
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


@pytest.mark.requires("base-layout")
def test_a_library_commit_rebuilds_exactly_its_dependents(ws: Workspace) -> None:
    ws.run("build")  # everything in place
    before = ws.report()
    (ws.root / "libs/common/src/acme_common/__init__.py").write_text(COMMON.format(word="v2"))
    ws.commit("common: v2")

    affected = json.loads(ws.run("affected", "--since=HEAD~1", "--json").stdout)
    assert affected["binaries"] == ["acme-tool"]
    (reason,) = affected["affected"][0]["reasons"]
    assert reason["kind"] == "library" and reason["via"] == ["acme-common"]
    assert reason["path"] == "libs/common/src/acme_common/__init__.py"
    assert json.loads(ws.run("plan", "--since=HEAD~1", "--json").stdout)["binaries"] == [
        "acme-tool"
    ]

    ws.run("build")
    after = ws.report()
    rebuilt = {i for i, a in after.items() if a["status"] == "built"}
    # The library and its one dependent (whose version follows the library: its wheel too).
    assert rebuilt == {
        "wheel:libs/common",
        "wheel:apps/tool",
        "zipapp:acme-tool",
        "image:acme-tool",
    }
    for action in ("wheel:apps/other", "zipapp:acme-other"):
        assert after[action]["status"] == "cached"
        assert after[action]["version"] == before[action]["version"], action
    # uv init wrote a static version: the project's own, shipped as declared; its key moves.
    assert after["zipapp:acme-tool"]["version"] == "0.1.0"
    assert after["zipapp:acme-tool"]["inputs"] != before["zipapp:acme-tool"]["inputs"]
    assert ws.zipapp("acme-tool").startswith(f"common v2 {DEP} 1.0 ")


@pytest.mark.requires("base-layout")
def test_an_app_only_edit_changes_only_the_last_layer(ws: Workspace) -> None:
    wanted = [Platform.parse(p) for p in PLATFORMS]
    layout = ws.root / "dist" / "images" / "acme-tool"
    before = {str(p): i for p, (i, _) in read_layout(layout, wanted).items()}
    _write_app(ws.root / "apps/tool", "acme_tool", TOOL.format(dep=DEP, edit=', "!"'))
    ws.commit("tool: shout")
    ws.run("build", "--since=HEAD~1")
    after = {str(p): i for p, (i, _) in read_layout(layout, wanted).items()}
    for platform in PLATFORMS:
        old = [x.descriptor.digest for x in before[platform].layers]
        new = [x.descriptor.digest for x in after[platform].layers]
        assert len(old) == len(new)
        assert old[:-1] == new[:-1], f"{platform}: a layer below the app's changed"
        assert old[-1] != new[-1], f"{platform}: the app's layer did not change"
    built = {i for i, a in ws.report().items() if a["status"] == "built"}
    assert built == {"wheel:apps/tool", "zipapp:acme-tool", "image:acme-tool"}


def test_an_out_of_date_lock_stops_the_build(ws: Workspace) -> None:
    pyproject = ws.root / "apps/other/pyproject.toml"
    text = pyproject.read_text()
    try:
        assert f'"{DEP}>=1.0"' in text  # as uv add wrote it
        pyproject.write_text(text.replace(f'"{DEP}>=1.0"', f'"{DEP}>=2"'))
        done = ws.run("build", check=False)
        assert done.returncode == 2, done.stderr
        assert "apps/other/pyproject.toml:" in done.stderr and "uv lock" in done.stderr
        assert "Traceback" not in done.stderr
    finally:
        pyproject.write_text(text)


@pytest.mark.requires("base-layout", "registry")
def test_a_fresh_clone_on_a_registry_cache_rebuilds_only_the_dependents(
    ws: Workspace, services: Services, tmp_path: Path
) -> None:
    """CI's case: a new machine (a clone, an empty local cache) sharing a
    registry-backed cache; one library commit later, only its dependents build."""
    remote = f"--cache=oci://{services.registry}/ws-cache-{uuid.uuid4().hex[:8]}"
    first = Workspace(ws.root, ws.index, {**ws.env, "SHIPYARD_CACHE_DIR": str(tmp_path / "c1")})
    first.run("build", remote)  # fills the registry (a new local cache: all built)
    before = first.report()
    (ws.root / "libs/common/src/acme_common/__init__.py").write_text(COMMON.format(word="v3"))
    ws.commit("common: v3")

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ws.root), str(clone)], env=ws.env, check=True)
    ci = Workspace(clone, ws.index, {**ws.env, "SHIPYARD_CACHE_DIR": str(tmp_path / "c2")})
    ci.run("build", remote)
    after = ci.report()
    built = {i for i, a in after.items() if a["status"] == "built"}
    assert built == {"wheel:libs/common", "wheel:apps/tool", "zipapp:acme-tool", "image:acme-tool"}
    for action in ("wheel:apps/other", "zipapp:acme-other"):
        assert after[action]["status"] == "cached", action
        assert after[action]["version"] == before[action]["version"], action
    assert ci.zipapp("acme-tool").startswith(f"common v3 {DEP} 1.0 ")
