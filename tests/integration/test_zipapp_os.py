"""Issue 15, item 1: zipapps for linux, darwin and windows on amd64 and arm64, built here.

Real `shipyard build` runs with real uv resolution against the package index this
machine's installers are configured for. A PyYAML-using binary gets one archive per
platform whose PyYAML wheel carries that platform's tag and its `_yaml` extension
module (`.so` for Linux and macOS 11+, `.pyd` for Windows); a pure binary gets one
universal archive for the six platforms, which runs here.
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
from shipyard.release.archives import write_release_archive

pytestmark = pytest.mark.integration

SIX = (
    "linux/amd64",
    "linux/arm64",
    "darwin/amd64",
    "darwin/arm64",
    "windows/amd64",
    "windows/arm64",
)
VERSION = "1.0.0"
EPOCH = 1_767_225_600  # the release archives' clock
# PyYAML publishes win_arm64 wheels from CPython 3.12 on: the YAML binary targets 3.12.
YAML_PYTHON = "3.12"
# platform -> (the wheel tag's platform part, the extension module's file name suffix)
EXPECTED = {
    "linux/amd64": (r"manylinux.*_x86_64", r"\.cpython-312-x86_64-linux-gnu\.so"),
    "linux/arm64": (r"manylinux.*_aarch64", r"\.cpython-312-aarch64-linux-gnu\.so"),
    "darwin/amd64": (r"macosx_(10_\d+|11_0)_(x86_64|universal2)", r"\.cpython-312-darwin\.so"),
    "darwin/arm64": (r"macosx_(10_\d+|11_0)_(arm64|universal2)", r"\.cpython-312-darwin\.so"),
    "windows/amd64": (r"win_amd64", r"\.cp312-win_amd64\.pyd"),
    "windows/arm64": (r"win_arm64", r"\.cp312-win_arm64\.pyd"),
}


def _repo(folder: Path, python: str, requires: list[str], program: str) -> Path:
    """A committed repository with one binary `app` (wheel and zipapp) for the six platforms."""
    package = folder / "app" / "app"
    package.mkdir(parents=True)
    (folder / "app" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        f'[project]\nname = "app"\nversion = "{VERSION}"\ndependencies = {json.dumps(requires)}\n'
    )
    (package / "__init__.py").write_text(program)
    (folder / "binaries.yaml").write_text(
        "schema: 1\n"
        f'project: {{name: os-test, version: "{VERSION}", python: "{python}"}}\n'
        "binaries:\n"
        "  app:\n"
        "    source: app\n"
        '    entrypoint: "app:main"\n'
        "    outputs: [wheel, zipapp]\n"
        f"    platforms: [{', '.join(SIX)}]\n"
    )
    (folder / ".gitignore").write_text("/dist/\n")
    git = ["git", "-C", str(folder), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    return folder


def _build(root: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shipyard", "build"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CI": "1", "SHIPYARD_CACHE_DIR": str(cache)},
        check=False,
    )


def _python(version: str) -> str | None:
    """An interpreter of `version` on this machine (pyenv's, or on PATH), or None."""
    pyenv = Path.home() / ".pyenv" / "versions"
    found = sorted(pyenv.glob(f"{version}.*/bin/python{version}")) if pyenv.is_dir() else []
    return str(found[-1]) if found else shutil.which(f"python{version}")


def _run(python: str, pyz: Path, root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, str(pyz)],
        env={**os.environ, boot.ROOT_ENV: str(root)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


YAML_PROGRAM = """\
import yaml
def main():
    print(yaml.__version__, yaml.__with_libyaml__, yaml.safe_dump({"six": 6}).strip())
"""


def test_a_pyyaml_binary_gets_each_platforms_native_wheel(tmp_path: Path) -> None:
    root = _repo(tmp_path / "repo", YAML_PYTHON, ["PyYAML>=6"], YAML_PROGRAM)
    built = _build(root, tmp_path / "cache")
    assert built.returncode == 0, built.stderr
    zipapps = root / "dist" / "zipapps"
    names = {f"app-{VERSION}-{p.replace('/', '_')}.pyz": p for p in SIX}
    assert sorted(p.name for p in zipapps.iterdir()) == sorted(names)
    found: dict[str, tuple[list[str], list[str]]] = {}
    for name, platform in names.items():
        with zipfile.ZipFile(zipapps / name) as archive:
            files = archive.namelist()
            (wheel,) = [f for f in files if re.fullmatch(r"site/pyyaml-[^/]+\.dist-info/WHEEL", f)]
            tags = [
                line.removeprefix("Tag: ")
                for line in archive.read(wheel).decode().splitlines()
                if line.startswith("Tag: ")
            ]
            info = json.loads(archive.read(BUILD_INFO))
        modules = [f for f in files if re.fullmatch(r"site/yaml/_yaml\..+", f)]
        found[platform] = (tags, modules)
        tag_pattern, suffix = EXPECTED[platform]
        assert tags and all(re.fullmatch(rf"cp312-cp312-{tag_pattern}", tag) for tag in tags), (
            platform,
            tags,
        )
        assert len(modules) == 1 and re.fullmatch(rf"site/yaml/_yaml{suffix}", modules[0]), (
            platform,
            modules,
        )
        assert info["platform"] == platform and info["platforms"] == [platform]
        assert info["native"] is True and info["python"] == YAML_PYTHON
    print("\nPyYAML wheel tags and extension modules per archive:")
    for platform, (tags, modules) in found.items():
        name = f"app-{VERSION}-{platform.replace('/', '_')}.pyz"
        size = (zipapps / name).stat().st_size
        print(f"  {platform:14} {', '.join(tags):45} {modules[0]:45} {size} bytes")

    # Each platform's release archive holds its zipapp (with a launcher on Windows).
    release = tmp_path / "release"
    for name, platform in names.items():
        download = write_release_archive(
            release,
            zipapp=zipapps / name,
            binary="app",
            version=VERSION,
            platform=platform,
            license_file=None,
            epoch=EPOCH,
        )
        print(f"  {download.name:36} {download.stat().st_size} bytes")
        stem = download.name.removesuffix(".zip").removesuffix(".tar.gz")
        if platform.startswith("windows/"):
            with zipfile.ZipFile(download) as packed:
                assert packed.read(f"{stem}/app.pyz") == (zipapps / name).read_bytes()
                launcher = packed.read(f"{stem}/app.cmd")
            assert launcher == f'@py -{YAML_PYTHON} "%~dp0app.pyz" %*\r\n'.encode()
        else:
            with tarfile.open(download) as packed:
                program = packed.extractfile(f"{stem}/app")
                assert program is not None
                assert program.read() == (zipapps / name).read_bytes()
    assert len(list(release.iterdir())) == len(SIX)

    python = _python(YAML_PYTHON)
    if python is None:
        pytest.fail(f"no Python {YAML_PYTHON} here to run the linux/amd64 archive with")
    here = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}[os.uname().machine]
    mine = zipapps / f"app-{VERSION}-{here.replace('/', '_')}.pyz"
    done = _run(python, mine, tmp_path / "zipapps")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[1:] == ["True", "six:", "6"]  # libyaml's extension loaded
    # The macOS archive on this Linux machine: one line naming the archive to use.
    mac = _run(python, zipapps / f"app-{VERSION}-darwin_arm64.pyz", tmp_path / "zipapps")
    assert mac.returncode == 2
    arch = here.partition("/")[2]
    assert mac.stderr == (
        f"app: built for darwin/arm64, but this machine is linux/{arch}; "
        f"use app-{VERSION}-linux_{arch}.pyz\n"
    )


PURE_PROGRAM = """\
import sys
def main():
    print("pure app on", sys.platform)
"""


def test_a_pure_binary_gets_one_universal_archive_that_runs_here(tmp_path: Path) -> None:
    here = "{}.{}".format(*sys.version_info[:2])
    root = _repo(tmp_path / "repo", here, [], PURE_PROGRAM)
    built = _build(root, tmp_path / "cache")
    assert built.returncode == 0, built.stderr
    zipapps = root / "dist" / "zipapps"
    (pyz,) = zipapps.iterdir()
    assert pyz.name == f"app-{VERSION}.pyz"
    with zipfile.ZipFile(pyz) as archive:
        info = json.loads(archive.read(BUILD_INFO))
        assert not any(f.endswith((".so", ".pyd")) for f in archive.namelist())
    assert info["platform"] == "any" and info["platforms"] == list(SIX)
    assert info["native"] is False
    done = _run(sys.executable, pyz, tmp_path / "zipapps")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "pure app on linux\n"
    print(f"\nuniversal archive: {pyz.name}, {pyz.stat().st_size} bytes")
