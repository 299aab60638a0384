"""Issue 18, items 2 to 4, through the CLI against the real registry and Docker engine.

- A build of one platform after a build of both keeps both (skopeo reads both from the
  layout and, after `shipyard push`, from the registry); after an edit it keeps only the
  platform it built, and `push` then refuses (exit 2) until `--allow-partial`.
- `release --platform` of a subset stops in preflight (exit 2).
- An entry point whose module is not in the wheel fails the image build (exit 1).
- Both platforms' `docker load` tarballs load side by side, each under its own tag.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.integration._images import tarball
from tests.integration.conftest import Services
from tests.tiny import VERSION, make_repo, shipyard

pytestmark = pytest.mark.integration

BINARY = "tinyplat"
BOTH = ["linux/amd64", "linux/arm64"]
SKOPEO = "/usr/bin/skopeo"


def _run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL, env=env
    )


def _repo(folder: Path, services: Services, hub: str | None = None) -> Path:
    root = make_repo(folder, {BINARY: (f"oci-layout:{services.base_layout}", BOTH)})
    if hub is not None:
        manifest = root / "binaries.yaml"
        text = manifest.read_text()
        assert text.count("image: {base: ") == 1
        manifest.write_text(text.replace("image: {base: ", f"image: {{hubs: [{hub}], base: "))
        _commit(root)
    return root


def _commit(root: Path) -> None:
    git = ["git", "-C", str(root), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "commit", "-qam", "edit"], check=True)


def _platforms(ref: str) -> list[str]:
    """The platforms of the index skopeo reads at `ref` (oci:PATH or docker://...)."""
    done = _run(
        SKOPEO, "inspect", "--raw", *(["--tls-verify=false"] * ref.startswith("docker")), ref
    )
    assert done.returncode == 0, done.stderr
    index = json.loads(done.stdout)
    return sorted(
        "/".join(m["platform"][k] for k in ("os", "architecture")) for m in index["manifests"]
    )


def _build(root: Path, cache: Path, *flags: str) -> None:
    built = shipyard(root, "build", "--output=image", *flags, cache=cache)
    assert built.returncode == 0, built.stderr


@pytest.mark.requires("registry", "skopeo", "base-layout")
def test_a_subset_build_keeps_both_platforms_and_push_sends_both(
    tmp_path: Path, services: Services
) -> None:
    hub = f"{services.registry}/ip-{uuid.uuid4().hex[:10]}"
    root = _repo(tmp_path / "repo", services, hub)
    cache = tmp_path / "cache"
    layout = f"oci:{root / 'dist' / 'images' / BINARY}"
    _build(root, cache)
    assert _platforms(layout) == BOTH
    _build(root, cache, "--platform=linux/arm64")
    assert _platforms(layout) == BOTH, "the arm64 build dropped amd64"
    pushed = shipyard(root, "push", "--tag=it", cache=cache)
    assert pushed.returncode == 0, pushed.stderr
    assert _platforms(f"docker://{hub}/{BINARY}:it") == BOTH


@pytest.mark.requires("registry", "skopeo", "base-layout")
def test_push_refuses_an_index_lacking_a_declared_platform(
    tmp_path: Path, services: Services
) -> None:
    hub = f"{services.registry}/ip-{uuid.uuid4().hex[:10]}"
    root = _repo(tmp_path / "repo", services, hub)
    cache = tmp_path / "cache"
    layout = f"oci:{root / 'dist' / 'images' / BINARY}"
    _build(root, cache)
    # An edit: the amd64 image in dist/ is now stale, so the arm64 build must not keep it.
    (root / "tiny" / "tiny" / "__init__.py").write_text("def main() -> None:\n    print(2)\n")
    _commit(root)
    _build(root, cache, "--platform=linux/arm64")
    assert _platforms(layout) == ["linux/arm64"]
    refused = shipyard(root, "push", "--tag=it", cache=cache)
    assert refused.returncode == 2, refused.stderr
    assert f"{BINARY}: the image in" in refused.stderr
    assert "lacks platform(s) linux/amd64" in refused.stderr
    assert "--allow-partial" in refused.stderr
    gone = _run(SKOPEO, "inspect", "--raw", "--tls-verify=false", f"docker://{hub}/{BINARY}:it")
    assert gone.returncode != 0, "nothing may be pushed before the refusal"
    forced = shipyard(root, "push", "--tag=it", "--allow-partial", cache=cache)
    assert forced.returncode == 0, forced.stderr
    assert _platforms(f"docker://{hub}/{BINARY}:it") == ["linux/arm64"]


@pytest.mark.requires("base-layout")
def test_a_release_of_a_platform_subset_stops_in_preflight(
    tmp_path: Path, services: Services
) -> None:
    root = _repo(tmp_path / "repo", services)
    done = shipyard(root, "release", "--snapshot", "--platform=linux/arm64", cache=tmp_path / "c")
    assert done.returncode == 2, done.stderr
    assert "linux/amd64" in done.stderr and BINARY in done.stderr
    assert "drop --platform" in done.stderr
    assert not (root / "dist" / "images").exists(), "nothing is built before the refusal"


@pytest.mark.requires("base-layout")
def test_an_entry_point_missing_from_the_wheel_fails_the_image(
    tmp_path: Path, services: Services
) -> None:
    root = _repo(tmp_path / "repo", services)
    manifest = root / "binaries.yaml"
    manifest.write_text(manifest.read_text().replace('"tiny:main"', '"notes:main"'))
    _commit(root)
    done = shipyard(root, "build", "--output=image", cache=tmp_path / "cache")
    assert done.returncode == 2, done.stderr  # bad input: the manifest names no module
    assert f"entrypoint notes:main: no module notes in {BINARY}'s wheel" in done.stderr
    assert not (root / "dist" / "images" / BINARY).exists()


@pytest.mark.requires("docker", "base-layout")
def test_both_platform_tarballs_load_side_by_side(tmp_path: Path, services: Services) -> None:
    root = _repo(tmp_path / "repo", services)
    _build(root, tmp_path / "cache")
    env = {"DOCKER_HOST": services.docker_host, "PATH": "/usr/local/bin:/usr/bin:/bin"}
    tags = {arch: f"{BINARY}:{VERSION}-{arch}" for arch in ("amd64", "arm64")}
    try:
        for arch, tag in tags.items():
            archive = tarball(root / "dist", BINARY, f"linux/{arch}")
            loaded = _run("docker", "load", "--input", str(archive), env=env)
            assert loaded.returncode == 0, loaded.stderr
            assert f"Loaded image: {tag}" in loaded.stdout
        for arch, tag in tags.items():
            shown = _run(
                "docker", "image", "inspect", "--format", "{{.Architecture}}", tag, env=env
            )
            assert shown.returncode == 0, f"{tag}: {shown.stderr}"
            assert shown.stdout.strip() == arch
        plain = _run("docker", "image", "inspect", f"{BINARY}:{VERSION}", env=env)
        assert plain.returncode != 0, "no tag is shared between the platforms' tarballs"
    finally:
        old = [f"{BINARY}:{VERSION}-linux_{arch}" for arch in tags] + [f"{BINARY}:{VERSION}"]
        _run("docker", "image", "rm", "--force", *tags.values(), *old, env=env)
