"""Issue 15, item 2: zipapps for several target Pythons, run with each interpreter here.

One real `shipyard build` of a repository whose project.python is ["3.11", "3.12",
"3.13"], with real uv resolution against the package index this machine's
installers are configured for: a pure binary gets one archive that CPython 3.11,
3.12 and 3.13 (pyenv's) all run; a PyYAML binary gets one archive per Python and
platform, each run by its own interpreter, and the wrong interpreter gets one line
and exit status 2 naming the archive to use. An image whose base uses `${python}`
gets one image per Python, each resolved for it, pushed with tags suffixed
`-python3.12` to the local registry.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from shipyard.builders.zipapp import _boot as boot
from shipyard.builders.zipapp._boot.layout import BUILD_INFO
from tests.integration._images import tarball
from tests.integration.conftest import Services

pytestmark = pytest.mark.integration

VERSION = "1.0.0"
PYTHONS = ("3.11", "3.12", "3.13")
PLATFORMS = ("linux/amd64", "linux/arm64")
HERE = {"x86_64": "linux_amd64", "aarch64": "linux_arm64"}[os.uname().machine]

PURE = """\
import sys
def main():
    print("pure", "{}.{}".format(*sys.version_info[:2]))
"""
NATIVE = """\
import sys, yaml
def main():
    print("yaml", "{}.{}".format(*sys.version_info[:2]), yaml.__with_libyaml__,
          yaml.safe_dump({"v": 1}).strip())
"""


def _project(folder: Path, name: str, requires: list[str], program: str) -> None:
    package = folder / name / name
    package.mkdir(parents=True)
    (folder / name / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        f'[project]\nname = "{name}"\nversion = "{VERSION}"\n'
        f"dependencies = {json.dumps(requires)}\n"
    )
    (package / "__init__.py").write_text(program)


def _repo(folder: Path) -> Path:
    _project(folder, "pureapp", [], PURE)
    _project(folder, "yamlapp", ["PyYAML==6.0.2"], NATIVE)
    (folder / "binaries.yaml").write_text(
        "schema: 1\n"
        "project:\n"
        "  name: pythons-test\n"
        f'  version: "{VERSION}"\n'
        f"  python: {json.dumps(list(PYTHONS))}\n"
        "defaults:\n"
        "  outputs: [zipapp]\n"
        f"  platforms: [{', '.join(PLATFORMS)}]\n"
        "  smoke: [go]\n"  # what release validate runs each zipapp with
        "binaries:\n"
        "  pureapp: {source: pureapp, entrypoint: 'pureapp:main'}\n"
        "  yamlapp: {source: yamlapp, entrypoint: 'yamlapp:main'}\n"
    )
    (folder / ".gitignore").write_text("/dist/\n")
    git = ["git", "-C", str(folder), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    return folder


def _shipyard(root: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shipyard", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CI": "1", "SHIPYARD_CACHE_DIR": str(cache)},
        check=False,
    )


def _python(version: str) -> str:
    """pyenv's CPython `version` (or one on PATH); the test needs all three."""
    pyenv = Path.home() / ".pyenv" / "versions"
    found = sorted(pyenv.glob(f"{version}.*/bin/python{version}")) if pyenv.is_dir() else []
    path = str(found[-1]) if found else shutil.which(f"python{version}")
    if path is None:
        pytest.fail(f"no Python {version} on this machine (pyenv install {version})")
    return path


def _run(python: str, pyz: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, str(pyz)],
        env={**os.environ, boot.ROOT_ENV: str(cache)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _info(pyz: Path) -> dict[str, object]:
    with zipfile.ZipFile(pyz) as archive:
        info: dict[str, object] = json.loads(archive.read(BUILD_INFO))
        return info


def test_zipapps_for_three_pythons_run_with_each_interpreter(tmp_path: Path) -> None:
    root = _repo(tmp_path / "repo")
    cache, unpacked = tmp_path / "cache", tmp_path / "zipapps"
    interpreters = {v: _python(v) for v in PYTHONS}

    planned = _shipyard(root, cache, "plan", "--json")
    assert planned.returncode == 0, planned.stderr
    zipapp_actions = [a for a in json.loads(planned.stdout)["actions"] if a["kind"] == "zipapp"]
    assert [a["pythons"] for a in zipapp_actions] == [list(PYTHONS)] * 2

    built = _shipyard(root, cache, "build")
    assert built.returncode == 0, built.stderr
    zipapps = root / "dist" / "zipapps"
    names = sorted(p.name for p in zipapps.iterdir())
    per_version = [
        f"yamlapp-{VERSION}-py{v}-{p.replace('/', '_')}.pyz" for v in PYTHONS for p in PLATFORMS
    ]
    assert names == sorted([f"pureapp-{VERSION}.pyz", *per_version])
    for name in names:
        print(f"\n{name}: {(zipapps / name).stat().st_size} bytes", end="")

    # The pure binary: one archive for every platform and Python, run by each Python.
    pure = zipapps / f"pureapp-{VERSION}.pyz"
    info = _info(pure)
    assert info["platform"] == "any" and info["pythons"] == list(PYTHONS)
    for version, python in interpreters.items():
        done = _run(python, pure, unpacked)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"pure {version}\n"
    # ... and refused by a Python it was not built for, in one line.
    older = _run(_python("3.10"), pure, unpacked)
    assert older.returncode == 2
    assert re.fullmatch(
        r"pureapp: built for Python 3\.11, 3\.12, 3\.13, but this is Python 3\.10 \(.+\); "
        r"run it with python3\.11 or python3\.12 or python3\.13\n",
        older.stderr,
    ), older.stderr

    # The native binary: each Python's archive holds that Python's extension module.
    tags = {"3.11": "cpython-311", "3.12": "cpython-312", "3.13": "cpython-313"}
    for version, python in interpreters.items():
        mine = zipapps / f"yamlapp-{VERSION}-py{version}-{HERE}.pyz"
        with zipfile.ZipFile(mine) as archive:
            modules = [n for n in archive.namelist() if re.fullmatch(r"site/yaml/_yaml\..+", n)]
        assert len(modules) == 1 and tags[version] in modules[0], modules
        info = _info(mine)
        assert info["python"] == version and info["pythons"] == [version]
        assert info["built_pythons"] == list(PYTHONS)
        done = _run(python, mine, unpacked)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"yaml {version} True v: 1\n"  # libyaml's extension loaded
        print(f"\n{mine.name}: {mine.stat().st_size} bytes, ran with {python}")
    print(f"{pure.name}: {pure.stat().st_size} bytes, ran with {', '.join(interpreters.values())}")

    # The wrong interpreter: one line, exit status 2, naming the archive built for it.
    wrong = _run(interpreters["3.13"], zipapps / f"yamlapp-{VERSION}-py3.12-{HERE}.pyz", unpacked)
    assert wrong.returncode == 2
    assert wrong.stderr == (
        f"yamlapp: built for Python 3.12, but this is Python 3.13 ({interpreters['3.13']}); "
        f"run it with python3.12, or use yamlapp-{VERSION}-py3.13*.pyz, built for it\n"
    )
    # The wrong machine: the archive of this machine for the same Python.
    other = "linux_arm64" if HERE == "linux_amd64" else "linux_amd64"
    foreign = _run(
        interpreters["3.12"], zipapps / f"yamlapp-{VERSION}-py3.12-{other}.pyz", unpacked
    )
    assert foreign.returncode == 2
    assert foreign.stderr.endswith(f"; use yamlapp-{VERSION}-py3.12-{HERE}.pyz\n"), foreign.stderr


def test_a_release_archives_and_smoke_runs_each_python_s_zipapp(tmp_path: Path) -> None:
    """Staging names each Python's archives for it, and validate runs each Python's
    zipapp with that Python's interpreter (found on PATH)."""
    root = _repo(tmp_path / "repo")
    bins = os.pathsep.join(str(Path(_python(v)).parent) for v in PYTHONS)
    done = subprocess.run(
        [sys.executable, "-m", "shipyard", "release", f"--version={VERSION}", "--dry-run"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        env={
            **os.environ,
            "PATH": f"{bins}{os.pathsep}{os.environ.get('PATH', '')}",
            "SHIPYARD_CACHE_DIR": str(tmp_path / "cache"),
            boot.ROOT_ENV: str(tmp_path / "zipapps"),
        },
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    folder = root / "dist" / "release" / f"{VERSION}.dry-run"
    staged = json.loads((folder / "release.json").read_text())
    archives = sorted(Path(a["path"]).name for a in staged["artifacts"] if a["kind"] == "archive")
    arches = ("linux-amd64", "linux-arm64")
    assert archives == sorted(
        [f"pureapp-{VERSION}-{a}.tar.gz" for a in arches]
        + [f"yamlapp-{VERSION}-py{v}-{a}.tar.gz" for v in PYTHONS for a in arches]
    )
    for version in PYTHONS:  # each Python's own zipapp, run by its own interpreter
        line = next(
            x
            for x in done.stderr.splitlines()
            if x.startswith(f"smoke yamlapp-{VERSION}-py{version}-{HERE}.pyz: ")
        )
        assert line.endswith(f"yaml {version} True v: 1"), line
    tarball = folder / "archives" / f"yamlapp-{VERSION}-py3.13-linux-arm64.tar.gz"
    with tarfile.open(tarball) as inside:
        program = inside.extractfile(f"yamlapp-{VERSION}-py3.13-linux-arm64/yamlapp")
        assert program is not None
        with zipfile.ZipFile(program) as archive:
            assert json.loads(archive.read(BUILD_INFO))["archive_python"] == "3.13"


IMAGE_MANIFEST = """\
schema: 1
project: {{name: pythons-image, version: "{version}", python: ["3.11", "3.12"]}}
binaries:
  yamlimg:
    source: yamlimg
    entrypoint: "yamlimg:main"
    outputs: [image]
    platforms: [linux/amd64]
    image:
      base: "oci-layout:{bases}/python-${{python}}"
      hubs: ["{hub}"]
      tags: [it]
"""


def _layers(layout: Path) -> list[str]:
    """The file names in every layer of the layout's one image (a one-platform index)."""

    def blob(digest: str) -> Path:
        return layout / "blobs" / "sha256" / digest.partition(":")[2]

    (top,) = json.loads((layout / "index.json").read_text())["manifests"]
    index = json.loads(blob(top["digest"]).read_bytes())
    (entry,) = index["manifests"]
    manifest = json.loads(blob(entry["digest"]).read_bytes())
    names: list[str] = []
    for layer in manifest["layers"]:
        with tarfile.open(blob(layer["digest"]), "r:gz") as tar:
            names += tar.getnames()
    return names


@pytest.mark.requires("registry", "base-layout")
def test_an_image_per_python_is_pushed_with_suffixed_tags(
    tmp_path: Path, services: Services
) -> None:
    import uuid

    from shipyard.oci.remote.registry import Registry

    # There is one Python base here (3.11): the 3.12 "base" is a copy of it, which is
    # enough to show what is resolved, built, tagged and pushed per Python.
    bases = tmp_path / "bases"
    for version in ("3.11", "3.12"):
        shutil.copytree(services.base_layout, bases / f"python-{version}")
    root = tmp_path / "repo"
    _project(root, "yamlimg", ["PyYAML==6.0.2"], NATIVE)
    hub = f"{services.registry}/it-pythons-{uuid.uuid4().hex[:10]}"
    (root / "binaries.yaml").write_text(
        IMAGE_MANIFEST.format(version=VERSION, bases=bases, hub=hub)
    )
    (root / ".gitignore").write_text("/dist/\n")
    git = ["git", "-C", str(root), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    cache = tmp_path / "cache"

    built = _shipyard(root, cache, "build")
    assert built.returncode == 0, built.stderr
    layout = root / "dist" / "images" / "yamlimg"
    per_python = layout / "variants" / "python3.12"
    default_files, other_files = _layers(layout), _layers(per_python)
    assert any(re.search(r"_yaml\.cpython-311-x86_64-linux-gnu\.so$", n) for n in default_files)
    assert any(re.search(r"_yaml\.cpython-312-x86_64-linux-gnu\.so$", n) for n in other_files)
    assert not any("cpython-312" in n for n in default_files)
    assert not list((root / "dist" / "images").glob("*.tar")), "tarballs on request only"
    tarballs = sorted(
        tarball(root / "dist", "yamlimg", "linux/amd64", v).name for v in ("", "python3.12")
    )
    assert tarballs == [
        f"yamlimg-{VERSION}-linux_amd64.tar",
        f"yamlimg-{VERSION}-python3.12-linux_amd64.tar",
    ]

    pushed = _shipyard(root, cache, "push")
    assert pushed.returncode == 0, pushed.stderr
    client = Registry(services.registry)
    repo = f"{hub.partition('/')[2]}/yamlimg"
    for tag, folder in (("it", layout), ("it-python3.12", per_python)):
        digest = json.loads((folder / "index.json").read_text())["manifests"][0]["digest"]
        assert client.manifest_exists(repo, tag) == digest, tag
    assert client.manifest_exists(repo, "it") != client.manifest_exists(repo, "it-python3.12")
    for name in tarballs:
        print(f"\n{name}: {(root / 'dist' / 'images' / name).stat().st_size} bytes", end="")
