"""A build backend never sees shipyard's secrets, while shipyard itself still uses them.

Regression (security review, item 1): `build_env()` handed every build subprocess the
whole environment, so the PEP 517 backend of a project (code from the repository, or from
an index through its build requirements) could read the signing key, its password and
the registry and index passwords a release runs with.

An in-tree backend (`backend-path`) writes its `os.environ` to a file. `shipyard build`
builds the wheel and an image on the base image pulled from the real registry, with
the secrets of a release planted (the real credentials of a basic-auth registry among
them); `shipyard push` then pushes the image there with those credentials.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.oci.remote.auth import Credentials, env_variable_names
from shipyard.oci.remote.registry import Registry
from tests.integration.conftest import Services
from tests.integration.registries import (
    PASSWORD,
    USER,
    ExtraRegistry,
    registry_binary,
    running_registry,
    write_htpasswd,
)
from tests.reliability import record
from tests.unit.test_process_secrets import BACKEND

pytestmark = [pytest.mark.integration, pytest.mark.requires("registry")]

TOKEN = secrets.token_hex(8)


@pytest.fixture(scope="module")
def basic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExtraRegistry]:
    if registry_binary() is None:
        pytest.skip("docker-registry is not installed")
    folder = tmp_path_factory.mktemp("build-secrets-registry")
    write_htpasswd(folder / "htpasswd", USER, PASSWORD)
    with running_registry(folder / "registry", htpasswd=folder / "htpasswd") as registry:
        yield registry


def _repo(root: Path, base: str, hub: str) -> Path:
    (root / "app" / "app").mkdir(parents=True)
    (root / "app" / "_build").mkdir()
    (root / "app" / "_build" / "backend.py").write_text(BACKEND)
    (root / "app" / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["_build"]\n'
        '[project]\nname = "app"\nversion = "1.0.0"\n'
    )
    (root / "binaries.yaml").write_text(
        'schema: 1\nproject: {name: demo, version: "1.0.0", python: "3.11"}\nbinaries:\n'
        '  app:\n    source: app\n    entrypoint: "app:main"\n    outputs: [wheel, image]\n'
        "    platforms: [linux/amd64]\n"
        f'    image: {{base: "{base}", hubs: ["{hub}"], tags: ["1.0.0"]}}\n'
    )
    (root / ".gitignore").write_text("/dist/\n")
    git = ["git", "-C", str(root), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    return root


@pytest.mark.reliability
def test_a_release_environment_reaches_shipyard_but_not_the_build_backend(
    services: Services, basic: ExtraRegistry, tmp_path: Path
) -> None:
    """Bug: the backend's environment held the signing key, its password and the registry
    and index credentials."""
    hub = f"{basic.host}/build-secrets-{uuid.uuid4().hex[:8]}"
    root = _repo(tmp_path / "repo", services.base_image, hub)
    dump = tmp_path / "backend-env.json"
    user_var, password_var = env_variable_names(basic.host)
    planted = {
        "SHIPYARD_SIGNING_KEY": "-----BEGIN ENCRYPTED PRIVATE KEY-----\n"
        f"signing-{TOKEN}\n-----END ENCRYPTED PRIVATE KEY-----\n",
        "SHIPYARD_SIGNING_KEY_PASSWORD": f"key-password-{TOKEN}",
        "SHIPYARD_REGISTRY_USER": f"decoy-user-{TOKEN}",
        "SHIPYARD_REGISTRY_PASSWORD": f"decoy-password-{TOKEN}",
        user_var: USER,  # the real pair: shipyard must still push with it
        password_var: PASSWORD,
        "SHIPYARD_INDEX_USER": f"index-user-{TOKEN}",
        "SHIPYARD_INDEX_PASSWORD": f"index-password-{TOKEN}",
    }
    env = {
        **{k: v for k, v in os.environ.items() if not k.upper().startswith("SHIPYARD_")},
        "CI": "1",
        "DOCKER_CONFIG": str(tmp_path / "no-docker-config"),
        "GIT_CONFIG_GLOBAL": os.devnull,
        "UV_OFFLINE": "1",
        "PIP_NO_INDEX": "1",
        "SHIPYARD_CACHE_DIR": str(tmp_path / "cache"),
        "BACKEND_ENV_DUMP": str(dump),
        **planted,
    }
    runs = {}
    for command in (("build", "--binary", "app"), ("push", "--binary", "app")):
        done = subprocess.run(
            [sys.executable, "-m", "shipyard", *command],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        assert done.returncode == 0, (command, (done.stdout + done.stderr)[-3000:])
        runs[command[0]] = done
    seen: dict[str, str] = json.loads(dump.read_text())
    text = json.dumps(seen)
    leaked = sorted(set(planted) & set(seen))
    leaked += [n for n, v in planted.items() if n not in leaked and v.strip() in text]
    assert not leaked, f"the backend saw {leaked}"
    assert seen["SHIPYARD_VERSION"] == "1.0.0"
    # shipyard's own client had the credentials: the tag is there, read back with them.
    registry = Registry(f"http://{basic.host}", credentials=Credentials(USER, PASSWORD))
    repository = hub.partition("/")[2] + "/app"
    assert registry.manifest_exists(repository, "1.0.0") is not None
    record(
        "secrets of a release in a build backend's environment",
        area="secrets",
        cases=len(planted),
        injected=f"{len(planted)} secret variables (signing key as PEM text and its password, "
        "decoy global registry credentials, the real per-host credentials of a basic-auth "
        "registry, index user and password) in the environment of `shipyard build` (wheel "
        "by an in-tree PEP 517 backend that writes os.environ, image on the base from the "
        "registry) and `shipyard push`",
        result=f"0 of {len(planted)} names or values in the backend's environment; the image "
        "pushed to the basic-auth registry with the per-host credentials and read back",
        figures={"planted": len(planted), "leaked": 0},
    )
