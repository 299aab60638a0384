"""The example suite as a uv workspace, built for real: meshctl, mesh-discovery and mesh-agent
zipapps carry the in-repo libraries they use (mesh-api, mesh-config), the two mesh-api users
talk to each other, and a `make lock` uv.lock decides what third-party version ships."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from shipyard.manifest import load_manifest
from tests.integration._repo import copy_worktree, shipyard

pytestmark = pytest.mark.integration

# Binary -> the in-repo library it ships with.
LIBRARY = {"meshctl": "mesh-api", "mesh-discovery": "mesh-api", "mesh-agent": "mesh-config"}
HOST = "linux/amd64" if os.uname().machine in ("x86_64", "amd64") else "linux/arm64"
# Older than what the index serves today, and with cp311 wheels for both platforms.
LOCKED_PYYAML = "6.0.2"
TIMEOUT = 60


@dataclass(frozen=True)
class Build:
    """The example zipapps for this machine, built in a fresh copy of the work tree."""

    root: Path
    version: str
    zipapps: dict[str, Path]
    wheels: dict[str, tuple[str, int]]
    """Each project's wheel: its version and how many wheel actions built it."""


def build(root: Path, binaries: tuple[str, ...]) -> Build:
    """`shipyard build` the zipapps of `binaries` for this machine's platform only."""
    done = shipyard(
        root,
        "build",
        "--binary",
        ",".join(binaries),
        "--output",
        "zipapp",
        "--platform",
        HOST,
        "--no-cache",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((root / "dist" / "report.json").read_text())
    zipapps = {
        output["binary"]: root / output["path"]
        for action in report["actions"]
        if action["kind"] == "zipapp"
        for output in action["outputs"]
        if output["platform"] in ("any", HOST)
    }
    assert set(zipapps) == set(binaries), report
    wheels: dict[str, tuple[str, int]] = {}
    for action in report["actions"]:
        if action["kind"] == "wheel":
            for output in action["outputs"]:
                name, version = output["metadata"]["wheel"]
                wheels[name] = (version, wheels.get(name, ("", 0))[1] + 1)
    return Build(root, report["version"], zipapps, wheels)


def clean_env(cache: Path) -> dict[str, str]:
    """An environment where a zipapp imports only what it carries."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return {**env, "SHIPYARD_ZIPAPP_ROOT": str(cache), "NO_COLOR": "1"}


def run(pyz: Path, *args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    """Run a zipapp with the interpreter running the tests."""
    return subprocess.run(
        [sys.executable, str(pyz), *args],
        env=clean_env(cache),
        capture_output=True,
        text=True,
        check=False,
        timeout=TIMEOUT,
    )


def site_packages(pyz: Path) -> set[str]:
    """The distributions a zipapp carries, as lowercase `name-version` from their .dist-info."""
    import zipfile

    with zipfile.ZipFile(pyz) as archive:
        return {
            name.split("/")[1].removesuffix(".dist-info").lower()
            for name in archive.namelist()
            if name.startswith("site/") and name.endswith(".dist-info/METADATA")
        }


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """The three zipapps, built without a uv.lock (third-party versions from the index)."""
    root = copy_worktree(tmp_path_factory.mktemp("repo"))
    assert not (root / "uv.lock").exists()
    return build(root, tuple(LIBRARY))


def test_the_libraries_are_built_once_and_shipped_in_their_users(examples: Build) -> None:
    # One wheel per library, shared by its users (built once, not once per binary).
    assert set(examples.wheels) == {*LIBRARY, *LIBRARY.values()}
    assert all(count == 1 for _, count in examples.wheels.values()), examples.wheels
    for binary, library in LIBRARY.items():
        carried = site_packages(examples.zipapps[binary])
        version = examples.wheels[library][0]
        assert f"{library.replace('-', '_')}-{version}" in carried, (binary, carried)
        other = "mesh_config" if library == "mesh-api" else "mesh_api"
        assert not any(d.startswith(other + "-") for d in carried), (binary, carried)
    # PyYAML came with mesh-config, not with mesh-agent itself, and only to mesh-agent.
    assert any(d.startswith("pyyaml-") for d in site_packages(examples.zipapps["mesh-agent"]))
    assert not any(d.startswith("pyyaml-") for d in site_packages(examples.zipapps["meshctl"]))


def test_every_smoke_passes_and_libs_shows_the_library(examples: Build, tmp_path: Path) -> None:
    manifest = load_manifest(examples.root / "binaries.yaml")
    for binary, library in LIBRARY.items():
        pyz = examples.zipapps[binary]
        smoke = run(pyz, *manifest.binaries[binary].smoke, cache=tmp_path)
        assert smoke.returncode == 0, (binary, smoke.stderr)
        # The program name is the binary's name for these three.
        assert smoke.stdout.startswith(f"{binary} {examples.version} ("), smoke.stdout
        libs = run(pyz, "--libs", cache=tmp_path)
        version = examples.wheels[library][0]
        assert version not in ("0.0.0", "0.0.0+source")  # stamped by the build
        shipped = f"{library} {version}\n"
        assert (libs.returncode, libs.stdout) == (0, shipped), libs.stderr


def test_mesh_agent_parses_its_config_with_the_library_and_native_yaml(
    examples: Build, tmp_path: Path
) -> None:
    pyz = examples.zipapps["mesh-agent"]
    once = run(pyz, "--once", cache=tmp_path / "cache")
    assert once.returncode == 0, once.stderr
    assert json.loads(once.stdout)["yaml_native"] is True
    bad = tmp_path / "agent.yaml"
    bad.write_text("port: yes\n")
    refused = run(pyz, "--config", str(bad), "--once", cache=tmp_path / "cache")
    assert refused.returncode == 1
    assert refused.stderr == f"mesh-agent: {bad}: 'port' must be an integer 0-65535, got True\n"


@pytest.fixture
def discovery(examples: Build, tmp_path: Path) -> Iterator[str]:
    """The mesh-discovery zipapp serving on a free loopback port; its base URL."""
    server = subprocess.Popen(
        [sys.executable, str(examples.zipapps["mesh-discovery"]), "--port", "0"],
        env=clean_env(tmp_path / "discovery-cache"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # access logs; nothing reads them, so they must not block
        text=True,
    )
    try:
        assert server.stdout is not None
        banner = server.stdout.readline()
        assert banner.startswith("mesh-discovery listening on http://127.0.0.1:"), banner
        yield banner.rsplit(" ", 1)[1].strip()
        server.terminate()
        assert server.wait(TIMEOUT) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(TIMEOUT)


def test_meshctl_zipapp_drives_the_discovery_zipapp(
    examples: Build, discovery: str, tmp_path: Path
) -> None:
    pyz, cache = examples.zipapps["meshctl"], tmp_path / "ctl-cache"

    def meshctl(*args: str) -> subprocess.CompletedProcess[str]:
        return run(pyz, "--discovery", discovery, *args, cache=cache)

    assert meshctl("register", "web", "10.0.0.7:8080").stdout == "registered web at 10.0.0.7:8080\n"
    listed = meshctl("list", "--json")
    assert json.loads(listed.stdout) == [{"name": "web", "address": "10.0.0.7:8080"}]
    # binaries.yaml gives meshctl `extras: [toml]`: tomli-w is in its zipapp.
    toml = meshctl("list", "--toml")
    assert (toml.returncode, toml.stderr) == (0, ""), toml.stderr
    assert tomllib.loads(toml.stdout) == {"services": [{"name": "web", "address": "10.0.0.7:8080"}]}
    # The server refuses with the library's rule; the client reports it with the library's error.
    refused = meshctl("register", "Web_1", "10.0.0.7:8080")
    assert refused.returncode == 1
    assert refused.stderr.startswith("meshctl: invalid service name 'Web_1': use 1-63")
    assert meshctl("deregister", "web").stdout == "deregistered web\n"
    assert json.loads(meshctl("list", "--json").stdout) == []


def test_make_lock_pins_what_ships(tmp_path: Path) -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    root = copy_worktree(tmp_path / "repo")
    venv = Path(sys.executable).parent.parent
    # `make lock` as a user runs it, with this test's environment as the venv (-o: do not
    # bootstrap it again).
    locked = subprocess.run(
        [make, "-C", str(root), "lock", f"VENV={venv}", "-o", f"{venv}/bin/shipyard"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert locked.returncode == 0, locked.stdout + locked.stderr
    assert (root / "uv.lock").is_file()
    # An older PyYAML than the index's newest, as a team pins one; the lock stays current.
    pinned = subprocess.run(
        [str(venv / "bin" / "uv"), "lock", "--upgrade-package", f"pyyaml=={LOCKED_PYYAML}"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert pinned.returncode == 0, pinned.stderr
    # uv.lock is ignored by git: it records the index's address and is never committed.
    status = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert status.stdout == ""
    check = shipyard(root, "check")
    assert check.returncode == 0, check.stderr
    assert "uv.lock up to date" in check.stdout

    built = build(root, ("mesh-agent",))
    carried = site_packages(built.zipapps["mesh-agent"])
    assert f"pyyaml-{LOCKED_PYYAML}" in carried, carried
    assert f"mesh_config-{built.wheels['mesh-config'][0]}" in carried, carried
    once = run(built.zipapps["mesh-agent"], "--once", cache=tmp_path / "cache")
    assert once.returncode == 0, once.stderr
    assert json.loads(once.stdout)["yaml_native"] is True
