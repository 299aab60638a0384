"""A uv workspace whose members' requirements a hatch metadata hook writes, built from the
repository root with only a binaries.yaml added, as a new user would (issue 25, item 1).

acme-cli's hook makes it need acme-agent[evals]; acme-agent's hook makes it need
acme-core and beta, and its extra `evals` needs the in-repo acme-evals. The lock pins
alpha, beta and gamma at 1.0 while the index has moved on to 2.0. Each zipapp and image
must ship the repository's libraries (never an index copy) and the lock's versions, and
`affected` after a library edit names every binary that ships it.
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
from shipyard.builders.zipapp._boot.layout import BUILD_INFO
from tests.integration._images import image_says
from tests.integration.conftest import Services
from tests.unit._dynamic import (
    Uv,
    backend_index,
    backend_wheels,
    git_commit,
    hooked_workspace,
    offline,
    sdk_workspace,
)

__all__ = ["backend_wheels"]  # the session fixture, used by name

pytestmark = pytest.mark.integration

PLATFORMS = ("linux/amd64", "linux/arm64")
_SHOW = (
    "import importlib.metadata as m\n\n\ndef main() -> int:\n"
    "    names = ('acme-agent', 'acme-core', 'acme-evals', 'alpha', 'beta', 'gamma')\n"
    "    print(' '.join(f'{n}=={m.version(n)}' for n in names))\n    return 0\n"
)
_EXPECTED = "acme-agent==1.0 acme-core==1.0 acme-evals==1.0 alpha==1.0 beta==1.0 gamma==1.0"


@pytest.fixture(scope="module")
def repo(
    tmp_path_factory: pytest.TempPathFactory, backend_wheels: list[Path], services: Services
) -> tuple[Path, dict[str, str]]:
    top = tmp_path_factory.mktemp("dynamic")
    index = backend_index(top / "index", backend_wheels)
    uv = Uv(index, top / "uv-cache")
    root = hooked_workspace(top / "repo")
    (root / "apps/cli/src/acme_cli/__init__.py").write_text(_SHOW)
    uv(root, "lock")
    for name in ("alpha", "beta", "gamma"):
        index.add(name, "2.0")  # the index moves on; the lock does not
    (root / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: acme, version: '1.0', python: '3.11'}\n"
        f"defaults: {{platforms: [{', '.join(PLATFORMS)}],"
        f" image: {{base: 'oci-layout:{services.base_layout}'}}}}\n"
        "binaries:\n"
        "  cli: {source: apps/cli, entrypoint: 'acme_cli:main', outputs: [zipapp, image]}\n"
        "  agent: {source: apps/agent, entrypoint: 'acme_agent:main', extras: [evals],"
        " outputs: [zipapp]}\n"
    )
    (root / ".gitignore").write_text("/dist/\n")
    git_commit(root)
    env = {
        **offline(index, top / "uv-cache"),
        "SHIPYARD_CACHE_DIR": str(top / "shipyard-cache"),
        "NO_COLOR": "1",
        "CI": "1",
    }
    return root, env


def _shipyard(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shipyard", *args],
        cwd=root, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip


@pytest.mark.requires("base-layout", "docker", "qemu-aarch64")
def test_zipapps_and_images_ship_the_repositorys_libraries_and_the_locked_versions(
    repo: tuple[Path, dict[str, str]],
) -> None:
    root, env = repo
    plan = json.loads(_shipyard(root, env, "plan", "--json").stdout)
    deps = {a["id"]: a["deps"] for a in plan["actions"]}
    assert sorted(deps["zipapp:cli"]) == [
        "wheel:apps/agent", "wheel:apps/cli", "wheel:libs/core", "wheel:libs/evals",
    ]  # fmt: skip
    built = _shipyard(root, env, "build")
    assert built.returncode == 0, built.stderr
    # Everything is pure Python: one zipapp for both platforms.
    (native,) = (root / "dist/zipapps").glob("cli-*.pyz")
    with zipfile.ZipFile(native) as archive:
        shipped = json.loads(archive.read(BUILD_INFO))["distributions"]
    assert {k: shipped[k] for k in ("acme-evals", "alpha", "beta", "gamma")} == {
        "acme-evals": "1.0", "alpha": "1.0", "beta": "1.0", "gamma": "1.0",
    }  # fmt: skip
    ran = subprocess.run(
        [sys.executable, str(native)],
        env={**env, boot.ROOT_ENV: str(root.parent / "unpacked")},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == _EXPECTED
    for platform in PLATFORMS:
        assert image_says(root, "cli", platform) == _EXPECTED


@pytest.mark.requires("base-layout")
def test_affected_after_a_library_edit_names_every_binary_that_ships_it(
    repo: tuple[Path, dict[str, str]],
) -> None:
    root, env = repo
    init = root / "libs/evals/src/acme_evals/__init__.py"
    init.write_text(init.read_text() + "EDITED = True\n")
    git_commit(root, "edit acme-evals")
    try:
        done = _shipyard(root, env, "affected", "--since=HEAD~1", "--json")
        assert done.returncode == 0, done.stderr
        assert sorted(json.loads(done.stdout)["binaries"]) == ["agent", "cli"]
    finally:
        subprocess.run(["git", "-C", str(root), "reset", "-q", "--hard", "HEAD~1"], check=True,
                       env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull})  # fmt: skip


@pytest.fixture(scope="module")
def sdk(
    tmp_path_factory: pytest.TempPathFactory, backend_wheels: list[Path], services: Services
) -> tuple[Path, dict[str, str]]:
    top = tmp_path_factory.mktemp("sdk")
    index = backend_index(top / "index", backend_wheels)
    uv = Uv(index, top / "uv-cache")
    root = sdk_workspace(top / "repo")
    uv(root, "lock")
    for name in ("alpha", "beta", "gamma"):
        index.add(name, "2.0")  # what an unconstrained, un-overridden install would take
    (root / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: acme, version: '1.0', python: '3.11'}\n"
        f"defaults: {{platforms: [{', '.join(PLATFORMS)}],"
        f" image: {{base: 'oci-layout:{services.base_layout}'}}}}\n"
        "binaries:\n"
        "  server-a: {source: examples/server-a, entrypoint: 'server_a:main',"
        " outputs: [zipapp]}\n"
        "  server-b: {source: examples/server-b, entrypoint: 'server_b:main',"
        " outputs: [zipapp, image]}\n"
    )
    (root / ".gitignore").write_text("/dist/\n/uv.toml\n")
    git_commit(root)
    env = {
        **offline(index, top / "uv-cache"),
        "SHIPYARD_CACHE_DIR": str(top / "shipyard-cache"),
        "NO_COLOR": "1",
        "CI": "1",
    }
    del env["UV_NO_CONFIG"]  # as users run it: uv would read the root's [tool.uv]
    # Configuration shipyard did not choose, each of which would change or break the
    # install if uv or pip read it: a root uv.toml, the user's uv.toml, a pip.conf, and
    # constraints in the environment.
    (root / "uv.toml").write_text('constraint-dependencies = ["beta>=2"]\n')
    (top / "config" / "uv").mkdir(parents=True)
    (top / "config" / "uv" / "uv.toml").write_text('index-url = "http://127.0.0.1:9/simple"\n')
    (top / "pip.conf").write_text("[global]\nindex-url = http://127.0.0.1:9/simple\n")
    (top / "constraints.txt").write_text("alpha==2.0\ngamma==2.0\n")
    env.update(
        XDG_CONFIG_HOME=str(top / "config"),
        PIP_CONFIG_FILE=str(top / "pip.conf"),
        UV_CONSTRAINT=str(top / "constraints.txt"),
        PIP_CONSTRAINT=str(top / "constraints.txt"),
        UV_OVERRIDE=str(top / "constraints.txt"),
    )
    return root, env


@pytest.mark.requires("base-layout", "docker", "qemu-aarch64")
def test_an_sdk_whose_examples_depend_on_the_root_package_builds_from_the_root(
    sdk: tuple[Path, dict[str, str]],
) -> None:
    """The root package is a member and the dependency of the example members, and the
    root's `[tool.uv]` constrains (`>=`) and overrides: `check` agrees with uv that the
    lock is fresh, and every zipapp and image ships the root package built from the
    repository with the lock's versions, the constraint never re-applied to a
    hash-checked install."""
    root, env = sdk
    checked = _shipyard(root, env, "check")
    assert checked.returncode == 0, checked.stderr
    assert "uv.lock up to date" in checked.stdout
    built = _shipyard(root, env, "build")
    assert built.returncode == 0, built.stderr
    expected = {
        "server-a": "sdk acme-sdk==1.0 alpha==1.0 beta==- gamma==-",
        "server-b": "sdk acme-sdk==1.0 alpha==1.0 beta==1.0 gamma==1.0",
    }
    for binary, said in expected.items():
        (pyz,) = (root / "dist/zipapps").glob(f"{binary}-*.pyz")
        ran = subprocess.run(
            [sys.executable, str(pyz)],
            env={**env, boot.ROOT_ENV: str(root.parent / "unpacked" / binary)},
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() == said
    for platform in PLATFORMS:
        assert image_says(root, "server-b", platform) == expected["server-b"]
