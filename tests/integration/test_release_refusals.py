"""Releases that must stop, and where: preflight, validate, an existing different
artifact, a hub that only allows pull. The setup: tests/integration/_release.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from shipyard._fs import sha256_file
from shipyard.builders import BUILDERS as REAL_BUILDERS
from shipyard.errors import BuildError, UsageError
from shipyard.oci.remote.auth import Credentials
from shipyard.oci.remote.push import Publisher
from shipyard.oci.remote.registry import Registry, RegistryError
from shipyard.release import ReleaseOptions, release
from shipyard.release.pipeline import PIPELINE, run_pipeline
from shipyard.release.publish import PublishError
from tests.integration._release import (
    PLATFORMS,
    REAL_MANIFEST,
    RUN,
    Hubs,
    PackageServer,
    _no_wheels,
    context,
    hubs,
    index_files,
    make_repo,
    pypiserver,
    release_env,
)
from tests.integration.conftest import Services
from tests.integration.registries import (
    PASSWORD,
    USER,
    TokenIssuer,
    running_registry,
    running_token_server,
)
from tests.integration.test_push import make_layout

__all__ = ["hubs", "pypiserver"]  # fixtures the tests take, imported for pytest to find
pytestmark = [pytest.mark.integration, pytest.mark.requires("registry", "skopeo")]


@pytest.mark.parametrize(
    "problem",
    ["registry-password", "index-password", "dirty", "pep440", "tagged", "signing-key"],
)
def test_preflight_fails_before_anything_is_built(
    hubs: Hubs, pypiserver: PackageServer, tmp_path: Path, problem: str
) -> None:
    repo = make_repo(tmp_path / "repo")
    env = release_env(hubs, pypiserver, f"rel-pre-{problem}-{RUN}")
    version = "2.0.0"
    if problem == "registry-password":
        user_var = next(k for k in env if k.endswith("_PASSWORD") and "REGISTRY" in k)
        env[user_var] = "wrong"
    elif problem == "index-password":
        env["SHIPYARD_INDEX_PASSWORD"] = "wrong"
    elif problem == "dirty":
        (repo / "ctl" / "NOTES.txt").write_text("changed\n")
    elif problem == "pep440":
        version = "2.0.0-banana!"
    elif problem == "signing-key":  # an RSA key where a P-256 one belongs
        key = tmp_path / "rsa.pem"
        subprocess.run(
            ["openssl", "genpkey", "-algorithm", "RSA", "-out", str(key)],
            check=True,
            capture_output=True,
        )
        env["SHIPYARD_SIGNING_KEY"] = str(key)
    else:
        subprocess.run(["git", "-C", str(repo), "tag", "v2.0.0"], check=True)
    ctx = context(repo, env, ReleaseOptions(version=version))
    with pytest.raises(UsageError) as caught:
        release(ctx)
    assert caught.value.exit_code == 2
    if problem == "signing-key":
        assert "$SHIPYARD_SIGNING_KEY" in str(caught.value), caught.value
        assert "PRIVATE KEY" not in str(caught.value)
    assert [(r.name, r.status) for r in ctx.results][:2] == [
        ("preflight", "failed"),
        ("build", "skipped"),
    ]
    assert _no_wheels(repo)
    assert not (repo / "dist" / "release").exists()


@pytest.mark.requires("registry", "base-layout")
def test_a_failing_smoke_run_stops_the_release_in_validate(
    services: Services, hubs: Hubs, pypiserver: PackageServer, tmp_path: Path
) -> None:
    manifest = REAL_MANIFEST.replace("[wheel, zipapp, image]", "[wheel, zipapp]")
    manifest = manifest.replace("smoke: [--version]", "smoke: [--no-such-flag]")
    repo = make_repo(tmp_path / "repo", manifest)
    env = release_env(hubs, pypiserver, f"rel-smoke-{RUN}")
    env["BASE_LAYOUT"] = str(services.base_layout)
    before = index_files(pypiserver)
    ctx = context(repo, env, ReleaseOptions(version="5.0.0"), builders=REAL_BUILDERS)
    with pytest.raises(BuildError, match=r"smoke meshctl|smoke mesh-agent") as caught:
        release(ctx)
    assert "--no-such-flag" in " ".join(caught.value.command or ())
    assert [(r.name, r.status) for r in ctx.results] == [
        ("preflight", "ran"),
        ("build", "ran"),
        ("validate", "failed"),
        ("stage", "skipped"),
        ("publish", "skipped"),
        ("verify", "skipped"),
    ]
    assert not (repo / "dist" / "release" / "5.0.0").exists()
    assert index_files(pypiserver) == before


@pytest.mark.parametrize("kind", ["image", "wheel"])
def test_an_existing_different_artifact_is_a_clear_error(
    hubs: Hubs, pypiserver: PackageServer, tmp_path: Path, kind: str
) -> None:
    repo = make_repo(tmp_path / "repo")
    prefix = f"rel-differ-{kind}-{RUN}"
    env = release_env(hubs, pypiserver, prefix)
    version = "6.0.0" if kind == "image" else "6.0.1"
    ctx = context(repo, env, ReleaseOptions(version=version))
    run_pipeline(ctx, PIPELINE[:4])  # preflight, build, validate, stage
    folder = repo / "dist" / "release" / version
    staged = json.loads((folder / "release.json").read_text())
    if kind == "image":  # someone else pushes the version tag between preflight and publish
        other = tmp_path / "other"
        theirs = make_layout(other, PLATFORMS, f"someone else's {version}")
        Publisher(Registry).push("meshctl", other, [f"{hubs.open}/{prefix}"], [version])
        expected = rf"meshctl:{version} already exists with {theirs}"
    else:  # the index already holds another file under the wheel's name
        wheel = next(Path(a["path"]).name for a in staged["artifacts"] if a["kind"] == "wheel")
        changed = tmp_path / "changed" / wheel
        changed.parent.mkdir()
        changed.write_bytes((folder / "wheels" / wheel).read_bytes())
        with zipfile.ZipFile(changed, "a") as archive:
            archive.comment = b"a different build"
        assert ctx.index is not None
        ctx.index.upload(changed)
        expected = rf"already has {re.escape(wheel)} with sha256 {sha256_file(changed)}"
    with pytest.raises(PublishError, match=expected) as caught:
        run_pipeline(ctx, PIPELINE[4:])
    assert "release a new version" in str(caught.value) or "released differently" in str(
        caught.value
    )
    # Nothing staged is lost; the other artifact is untouched.
    assert json.loads((folder / "release.json").read_text()) == staged
    check = subprocess.run(
        ["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=folder, capture_output=True, check=False
    )
    assert check.returncode == 0
    if kind == "image":
        assert Registry(hubs.open).manifest_exists(f"{prefix}/meshctl", version) == theirs
    else:
        assert sha256_file(pypiserver.packages / wheel) == sha256_file(changed)


def test_a_hub_that_only_allows_pull_fails_preflight(
    hubs: Hubs, pypiserver: PackageServer, tmp_path: Path
) -> None:
    issuer = TokenIssuer(tmp_path, USER, PASSWORD)
    issuer.allowed = {"pull"}  # the account can log in and read, not push
    with (
        running_token_server(issuer) as realm,
        running_registry(tmp_path / "ro", token=(issuer, realm)) as readonly,
    ):
        client = Registry(readonly.host, credentials=Credentials(USER, PASSWORD))
        client.ping()
        assert client.manifest_exists("rel-ro/meshctl", "8.0.0") is None  # pull works
        with pytest.raises(RegistryError):
            client.check_push("rel-ro/meshctl")
        repo = make_repo(tmp_path / "repo")
        env = release_env(hubs, pypiserver, f"rel-ro-{RUN}")
        user_var = "SHIPYARD_REGISTRY_" + readonly.host.replace(".", "_").replace(":", "_")
        env["HUB_B"] = f"{readonly.host}/rel-ro"
        env[f"{user_var}_USER"] = USER
        env[f"{user_var}_PASSWORD"] = PASSWORD
        ctx = context(repo, env, ReleaseOptions(version="8.0.0"))
        with pytest.raises(UsageError, match=rf"hub {re.escape(readonly.host)}/rel-ro") as caught:
            release(ctx)
    assert caught.value.exit_code == 2
    assert [(r.name, r.status) for r in ctx.results][:2] == [
        ("preflight", "failed"),
        ("build", "skipped"),
    ]
    assert _no_wheels(repo)
