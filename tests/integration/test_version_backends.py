"""One version per wheel, the one shipyard reports, whatever backend makes the version
(issue 25, item 4).

Regression: the wheel build set only SETUPTOOLS_SCM_PRETEND_VERSION, so a project whose
version uv-dynamic-versioning (or pdm's scm source, or poetry-dynamic-versioning) reads
from git carried another version than the one shipyard reported and named files with,
and one action key gave two different wheels in two caches.

Each backend builds a real project here, in a git repository one commit past a tag, from
a file:// index holding the backends (fetched once by pip, the index's own client).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.unit._dynamic import git_commit
from tests.unit._workspaces import Index

pytestmark = pytest.mark.integration

BACKENDS = (
    "hatchling", "editables", "hatch-vcs", "setuptools", "setuptools-scm",
    "uv-dynamic-versioning", "pdm-backend", "poetry-core", "poetry-dynamic-versioning",
    "versioningit",
)  # fmt: skip

_SETUPTOOLS = (
    '[build-system]\nrequires = ["setuptools>=64", {extra}]\n'
    'build-backend = "setuptools.build_meta"\n'
)
_HATCH = '[build-system]\nrequires = ["hatchling", {extra}]\nbuild-backend = "hatchling.build"\n'
# backend -> (build system, tool tables)
PROJECTS = {
    "setuptools-scm": (_SETUPTOOLS.format(extra='"setuptools-scm>=8"'), "[tool.setuptools_scm]\n"),
    "hatch-vcs": (_HATCH.format(extra='"hatch-vcs"'), '[tool.hatch.version]\nsource = "vcs"\n'),
    "uv-dynamic-versioning": (
        _HATCH.format(extra='"uv-dynamic-versioning"'),
        '[tool.hatch.version]\nsource = "uv-dynamic-versioning"\n',
    ),
    "pdm-backend": (
        '[build-system]\nrequires = ["pdm-backend"]\nbuild-backend = "pdm.backend"\n',
        '[tool.pdm.version]\nsource = "scm"\n',
    ),
    "poetry-dynamic-versioning": (
        '[build-system]\nrequires = ["poetry-core>=2", "poetry-dynamic-versioning>=1,<2"]\n'
        'build-backend = "poetry_dynamic_versioning.backend"\n',
        '[tool.poetry]\nversion = "0.0.0"\n\n[tool.poetry-dynamic-versioning]\nenable = true\n',
    ),
    "versioningit": (_SETUPTOOLS.format(extra='"versioningit"'), "[tool.versioningit]\n"),
}  # fmt: skip


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    top = tmp_path_factory.mktemp("backends")
    wheels = top / "downloads"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-input",
         "--disable-pip-version-check", "-q", "-d", str(wheels), *BACKENDS],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    index = Index(top / "index")
    index.wheels.mkdir(parents=True)
    for wheel in wheels.glob("*.whl"):
        shutil.copy2(wheel, index.wheels / wheel.name)
    index.refresh()
    root = top / "repo"
    lines = ["schema: 1", "project: {name: v, version: git}", "binaries:"]
    for backend, (system, tools) in PROJECTS.items():
        name = f"app-{backend}".replace("_", "-")
        module = name.replace("-", "_")
        (root / backend / module).mkdir(parents=True)
        (root / backend / module / "__init__.py").write_text("def main() -> None: ...\n")
        (root / backend / "pyproject.toml").write_text(
            f'{system}\n[project]\nname = "{name}"\ndynamic = ["version"]\n'
            f'requires-python = ">=3.11"\n\n{tools}'
        )
        lines.append(f"  {backend}: {{source: {backend}, entrypoint: '{module}:main',"
                     " outputs: [wheel]}")  # fmt: skip
    # Versions the repository writes: a static one, and a file hatch reads.
    for folder, version_lines, dynamic in (
        ("static", 'version = "3.4.5"\n', ""),
        ("file", "", 'dynamic = ["version"]\n'),
    ):
        module = f"app_{folder}"
        (root / folder / module).mkdir(parents=True)
        (root / folder / module / "__init__.py").write_text(
            '__version__ = "6.7.8"\n\n\ndef main() -> None:\n    print("ran")\n'
        )
        hatch = f'[tool.hatch.version]\npath = "{module}/__init__.py"\n' if dynamic else ""
        (root / folder / "pyproject.toml").write_text(
            f'{_HATCH.format(extra="")}\n[project]\nname = "app-{folder}"\n{version_lines}'
            f'{dynamic}requires-python = ">=3.11"\n\n{hatch}'
        )
        lines.append(f"  {folder}: {{source: {folder}, entrypoint: '{module}:main',"
                     " outputs: [wheel, zipapp], platforms: [linux/amd64]}")  # fmt: skip
    (root / "binaries.yaml").write_text("\n".join(lines) + "\n")
    (root / ".gitignore").write_text("/dist/\n")
    git_commit(root, "one")
    subprocess.run(["git", "-C", str(root), "tag", "v1.2.0"], check=True)
    for folder in (*PROJECTS, "static", "file"):  # each project changes after the tag
        (root / folder / "README").write_text("one commit past the tag\n")
    git_commit(root, "two")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    env.update(UV_INDEX_URL=index.url, UV_OFFLINE="1", PIP_NO_INDEX="1",
               PIP_FIND_LINKS=str(index.wheels), NO_COLOR="1", CI="1")  # fmt: skip
    return root, env


def _build(
    root: Path, env: dict[str, str], cache: Path
) -> tuple[int, str, dict[str, dict[str, Any]]]:
    shutil.rmtree(root / "dist", ignore_errors=True)
    done = subprocess.run(
        [sys.executable, "-m", "shipyard", "build", "--keep-going"],
        cwd=root, env={**env, "SHIPYARD_CACHE_DIR": str(cache)}, capture_output=True,
        text=True, timeout=900, check=False,
    )  # fmt: skip
    report = json.loads((root / "dist" / "report.json").read_text())
    return done.returncode, done.stderr, {a["id"]: a for a in report["actions"]}


def _metadata_version(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode()
    return next(line.split(":", 1)[1].strip() for line in text.splitlines()
                if line.startswith("Version:"))  # fmt: skip


def test_every_backend_carries_the_reported_version_and_builds_the_same_bytes_twice(
    repo: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, env = repo
    code, _, first = _build(root, env, tmp_path / "cache-1")
    assert code == 1  # versioningit alone: it has no override (below)
    digests: dict[str, str] = {}
    for backend in PROJECTS:
        action = first[f"wheel:{backend}"]
        if backend == "versioningit":
            continue
        assert action["status"] == "built", (backend, action["reason"])
        (output,) = action["outputs"]
        wheel = root / output["path"]
        assert _metadata_version(wheel) == action["version"], backend
        assert action["version"].startswith("1.2.1.dev1+g"), action["version"]
        digests[backend] = output["sha256"]
    code, _, second = _build(root, env, tmp_path / "cache-2")  # a clean checkout's build
    for backend, digest in digests.items():
        assert second[f"wheel:{backend}"]["outputs"][0]["sha256"] == digest, backend


def test_a_backend_without_an_override_is_named_with_the_fix(
    repo: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, env = repo
    code, stderr, actions = _build(root, env, tmp_path / "cache")
    failed = actions["wheel:versioningit"]
    assert failed["status"] == "failed" and code == 1
    assert "the wheel's METADATA says version 1.2.0.post1+g" in failed["reason"]
    assert "shipyard reports 1.2.1.dev1+g" in failed["reason"]
    assert "versioningit has no override variable" in failed["reason"]
    assert "Traceback" not in stderr


def test_a_version_the_repository_writes_is_the_version_shipped(
    repo: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """A static [project].version, or a version file the backend reads (hatch's `path`),
    is the project's own: its wheel, zipapp and report carry it, not the git stamp."""
    root, env = repo
    _, _, actions = _build(root, env, tmp_path / "cache")
    for binary, version in (("static", "3.4.5"), ("file", "6.7.8")):
        wheel, zipapp = actions[f"wheel:{binary}"], actions[f"zipapp:{binary}"]
        assert wheel["status"] == zipapp["status"] == "built", zipapp["reason"]
        assert wheel["version"] == zipapp["version"] == version
        (pyz,) = zipapp["outputs"]
        assert Path(pyz["path"]).name == f"{binary}-{version}.pyz"
        ran = subprocess.run([sys.executable, str(root / pyz["path"])], capture_output=True,
                             text=True, timeout=120, check=False)  # fmt: skip
        assert ran.returncode == 0 and ran.stdout.strip() == "ran", ran.stderr


def test_members_pinned_to_one_version_by_the_plugin_get_it_together(
    repo: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """uv-dynamic-versioning's metadata hook pins a sibling exactly
    (`acme-core=={{ version }}`), as real workspaces do: after a commit that touches only
    the app, per-binary versions would give the app 1.0.1.dev1 and the library 1.0.0,
    which cannot be installed together. The pins imply lockstep: one version for both."""
    _, env = repo
    root = tmp_path / "pinned"
    hatch = _HATCH.format(extra='"uv-dynamic-versioning"')
    for folder, name, pins in (("core", "acme-core", ""), ("app", "acme-app", "acme-core")):
        module = name.replace("-", "_")
        (root / folder / module).mkdir(parents=True)
        (root / folder / module / "__init__.py").write_text(
            "import importlib.metadata as m\n\n\ndef main() -> None:\n"
            "    print(m.version('acme-app'), m.version('acme-core'))\n"
        )
        hook = (
            "[tool.hatch.metadata.hooks.uv-dynamic-versioning]\n"
            f'dependencies = ["{pins}=={{{{ version }}}}"]\n'
            if pins
            else ""
        )
        dynamic = '"version", "dependencies"' if pins else '"version"'
        (root / folder / "pyproject.toml").write_text(
            f'{hatch}\n[project]\nname = "{name}"\ndynamic = [{dynamic}]\n'
            f'requires-python = ">=3.11"\n\n'
            '[tool.hatch.version]\nsource = "uv-dynamic-versioning"\n\n'
            f'[tool.uv-dynamic-versioning]\nfallback-version = "0.0.0"\n\n{hook}'
        )
    (root / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: p, version: git}\nbinaries:\n"
        "  app: {source: app, entrypoint: 'acme_app:main', outputs: [zipapp],"
        " platforms: [linux/amd64]}\n"
    )
    (root / ".gitignore").write_text("/dist/\n")
    git_commit(root, "one")
    subprocess.run(["git", "-C", str(root), "tag", "v1.0.0"], check=True)
    (root / "app" / "README").write_text("only the app changes\n")
    git_commit(root, "two")
    run_env = {**env, "SHIPYARD_CACHE_DIR": str(tmp_path / "cache")}

    def build() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "shipyard", "build"], cwd=root, env=run_env,
            capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip

    done = build()
    assert done.returncode == 0, done.stderr
    report = json.loads((root / "dist" / "report.json").read_text())
    versions = {a["id"]: a["version"] for a in report["actions"]}
    assert versions["wheel:app"] == versions["wheel:core"] == versions["zipapp:app"]
    assert versions["zipapp:app"].startswith("1.0.1.dev1+g")
    (pyz,) = (root / "dist" / "zipapps").glob("app-*.pyz")
    ran = subprocess.run([sys.executable, str(pyz)], capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    assert ran.stdout.split() == [versions["zipapp:app"]] * 2, ran.stderr
    # Asked for per-binary versions, the pin cannot be met, and the build says so.
    manifest = root / "binaries.yaml"
    manifest.write_text(manifest.read_text().replace("version: git}", "version: git, "
                                                     "versioning: per-binary}"))  # fmt: skip
    failed = build()
    assert failed.returncode == 1
    assert "acme-core" in failed.stderr and "Traceback" not in failed.stderr
