"""Build subprocesses never see shipyard's secrets (`shipyard.process.without_secrets`).

Regression (security review, item 1): `build_env()` handed every build subprocess (the
PEP 517 backend, the installers of zipapp and image sites, and whatever plugins they
load, all code from the repository or an index) the whole environment, so in a release
the backend could read `SHIPYARD_SIGNING_KEY` (PEM text), its password, and the registry
and index users and passwords.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from shipyard.builders.wheel import build_env
from shipyard.engine.context import BuildContext
from shipyard.stamp import Stamp
from tests.reliability import record

TOKEN = secrets.token_hex(8)
# What a release's environment may hold; none of it may reach a build subprocess.
PLANTED = {
    "SHIPYARD_SIGNING_KEY": "-----BEGIN ENCRYPTED PRIVATE KEY-----\n"
    f"signing-{TOKEN}\n-----END ENCRYPTED PRIVATE KEY-----\n",
    "SHIPYARD_SIGNING_KEY_PASSWORD": f"key-password-{TOKEN}",
    "SHIPYARD_SIGNING_KEY_FILE": f"/keys/signing-{TOKEN}.pem",
    "SHIPYARD_REGISTRY_USER": f"registry-user-{TOKEN}",
    "SHIPYARD_REGISTRY_PASSWORD": f"registry-password-{TOKEN}",
    "SHIPYARD_REGISTRY_127_0_0_1_5000_USER": f"host-user-{TOKEN}",
    "SHIPYARD_REGISTRY_127_0_0_1_5000_PASSWORD": f"host-password-{TOKEN}",
    "SHIPYARD_REGISTRY_127_0_0_1_5000_TOKEN": f"host-token-{TOKEN}",
    "SHIPYARD_INDEX_USER": f"index-user-{TOKEN}",
    "SHIPYARD_INDEX_PASSWORD": f"index-password-{TOKEN}",
    "SHIPYARD_INDEX_URL": f"http://index-user:url-password-{TOKEN}@127.0.0.1:9/legacy/",
    "SHIPYARD_CACHE_TOKEN": f"cache-token-{TOKEN}",
    "SHIPYARD_DEPLOY_KEY": f"deploy-key-{TOKEN}",
    "shipyard_registry_password": f"lower-case-{TOKEN}",  # one name on Windows
}
# What builds need or may read: kept.
KEPT = {
    "SHIPYARD_DOCKER_NETWORK": "none",
    "SHIPYARD_HTTP_TIMEOUT": "30",
    "SHIPYARD_ZIPAPP_KEEP": "2",
    "SHIPYARD_SOURCE_URL": "http://127.0.0.1:9/repo",
    "SHIPYARD_INDEX_SIMPLE_URL": "http://127.0.0.1:9/simple/",
    "UNRELATED_SETTING": "kept",
}


def test_without_secrets_drops_every_secret_and_keeps_the_rest() -> None:
    """The one filter: secret SHIPYARD_* names (and SHIPYARD_* URLs with a password) go."""
    from shipyard.process import without_secrets  # here: the file runs on any shipyard

    env = {"PATH": "/usr/bin", "HOME": "/home/u", **PLANTED, **KEPT}
    assert without_secrets(env) == {"PATH": "/usr/bin", "HOME": "/home/u", **KEPT}


def test_build_env_is_without_secrets(tmp_path: Path) -> None:
    """Bug: `build_env(ctx)` was `dict(ctx.env)` plus the build's settings."""
    stamp = Stamp("1.2.3", None, False, 1_700_000_000)
    ctx = BuildContext(tmp_path, tmp_path / "dist", stamp, "3.11", {**PLANTED, **KEPT})
    env = build_env(ctx)
    assert not set(PLANTED) & set(env)
    assert all(env[name] == value for name, value in KEPT.items())
    assert env["SHIPYARD_VERSION"] == "1.2.3" and env["SOURCE_DATE_EPOCH"] == "1700000000"


BACKEND = '''\
"""An in-tree PEP 517 backend that writes what its environment holds."""
import base64, hashlib, json, os, zipfile

FILES = {
    "app/__init__.py": b"def main():\\n    print('hi')\\n",
    "app-1.0.0.dist-info/METADATA": b"Metadata-Version: 2.1\\nName: app\\nVersion: 1.0.0\\n\\n",
    "app-1.0.0.dist-info/WHEEL": (
        b"Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n\\n"
    ),
}


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with open(os.environ["BACKEND_ENV_DUMP"], "w") as out:
        json.dump(dict(os.environ), out)
    name = "app-1.0.0-py3-none-any.whl"
    lines = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as wheel:
        for path, data in FILES.items():
            wheel.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            lines.append("%s,sha256=%s,%d" % (path, digest.decode(), len(data)))
        lines.append("app-1.0.0.dist-info/RECORD,,")
        wheel.writestr("app-1.0.0.dist-info/RECORD", "\\n".join(lines) + "\\n")
    return name
'''


def _repo(root: Path) -> Path:
    (root / "app" / "app").mkdir(parents=True)
    (root / "app" / "app" / "__init__.py").write_text("def main():\n    print('hi')\n")
    (root / "app" / "_build").mkdir()
    (root / "app" / "_build" / "backend.py").write_text(BACKEND)
    (root / "app" / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["_build"]\n'
        '[project]\nname = "app"\nversion = "1.0.0"\n'
    )
    (root / "binaries.yaml").write_text(
        'schema: 1\nproject: {name: demo, version: "1.0.0", python: "3.11"}\nbinaries:\n'
        '  app: {source: app, entrypoint: "app:main", outputs: [wheel], '
        "platforms: [linux/amd64]}\n"
    )
    (root / ".gitignore").write_text("/dist/\n")
    git = ["git", "-C", str(root), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    return root


@pytest.mark.reliability
def test_a_build_backend_sees_no_secret_and_the_build_succeeds(tmp_path: Path) -> None:
    """Bug: the backend's `os.environ` held every planted secret variable."""
    root = _repo(tmp_path / "repo")
    dump = tmp_path / "backend-env.json"
    env = {
        **{k: v for k, v in os.environ.items() if not k.upper().startswith("SHIPYARD_")},
        "GIT_CONFIG_GLOBAL": os.devnull,
        "UV_OFFLINE": "1",
        "PIP_NO_INDEX": "1",
        "SHIPYARD_CACHE_DIR": str(tmp_path / "cache"),
        "BACKEND_ENV_DUMP": str(dump),
        **PLANTED,
        **KEPT,
    }
    done = subprocess.run(
        [sys.executable, "-m", "shipyard", "build", "--binary", "app"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert [p.name for p in (root / "dist" / "wheels").glob("*.whl")] == [
        "app-1.0.0-py3-none-any.whl"
    ]
    seen: dict[str, str] = json.loads(dump.read_text())
    leaked = sorted(set(PLANTED) & set(seen))
    assert not leaked, f"the backend saw {leaked}"
    assert TOKEN not in json.dumps(seen)  # every planted value holds it
    assert all(seen.get(name) == value for name, value in KEPT.items())
    assert seen["SHIPYARD_VERSION"] == "1.0.0"
    record(
        "secrets in a build backend's environment",
        area="secrets",
        cases=len(PLANTED),
        injected=f"{len(PLANTED)} secret variables in `shipyard build`'s environment (signing "
        "key as PEM text and its password, registry user/password pairs global and per host, "
        "a registry token, index user/password, an index URL with a password, other *_TOKEN "
        "and *_KEY names); an in-tree PEP 517 backend (backend-path) that writes os.environ",
        result=f"the wheel built; 0 of {len(PLANTED)} secret names or values in the backend's "
        f"environment; the {len(KEPT)} other settings kept",
        figures={"planted": len(PLANTED), "leaked": 0, "kept": len(KEPT)},
    )


def test_twine_is_handed_the_index_credentials_and_no_other_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review of the secret-stripping fix: twine ran with the whole environment, the
    signing key and the registry passwords included. A stand-in `twine` module (first
    on PYTHONPATH) records the environment it is run with."""
    from shipyard.release.index import PackageIndex

    fake = tmp_path / "fake"
    (fake / "twine").mkdir(parents=True)
    seen = tmp_path / "seen.json"
    (fake / "twine" / "__init__.py").write_text("")
    (fake / "twine" / "__main__.py").write_text(
        f"import json, os\nopen({str(seen)!r}, 'w').write(json.dumps(dict(os.environ)))\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(fake))
    planted = {
        "SHIPYARD_SIGNING_KEY": "-----BEGIN PRIVATE KEY-----" + secrets.token_hex(8),
        "SHIPYARD_REGISTRY_PASSWORD": secrets.token_hex(8),
        "SHIPYARD_REGISTRY_127_0_0_1_5000_PASSWORD": secrets.token_hex(8),
    }
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    wheel.write_bytes(b"wheel")
    assert PackageIndex("http://127.0.0.1:9/", "u", "index-pw")._twine(wheel) is None
    env = json.loads(seen.read_text())
    assert env["TWINE_USERNAME"] == "u" and env["TWINE_PASSWORD"] == "index-pw"
    assert not set(planted) & set(env)
    assert not any(value in json.dumps(env) for value in planted.values())
