"""Whole releases of a two-binary example to two loopback registries and a pypiserver:
the full release, snapshots and dry runs, wheels built only for images.

The example, the registries and the stand-in image builder: tests/integration/_release.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from shipyard.builders import BUILDERS as REAL_BUILDERS
from shipyard.errors import UsageError
from shipyard.oci.remote.registry import Registry
from shipyard.release import ReleaseOptions, release
from tests.integration._release import (
    MANIFEST,
    PLATFORMS,
    REAL_MANIFEST,
    RUN,
    Hubs,
    PackageServer,
    context,
    hubs,
    index_files,
    make_repo,
    pypiserver,
    release_env,
    tag_digests,
)
from tests.integration.conftest import Services
from tests.integration.registries import PASSWORD, USER
from tests.integration.test_push import skopeo_raw

__all__ = ["hubs", "pypiserver"]  # fixtures the tests take, imported for pytest to find
pytestmark = [pytest.mark.integration, pytest.mark.requires("registry", "skopeo")]


@pytest.mark.requires("registry", "skopeo", "base-layout", "docker")
def test_release_publishes_everything_and_verifies(
    services: Services, hubs: Hubs, pypiserver: PackageServer, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", REAL_MANIFEST)
    env = release_env(hubs, pypiserver, f"rel-full-{RUN}")
    env["BASE_LAYOUT"] = str(services.base_layout)
    lines: list[str] = []
    ctx = context(repo, env, ReleaseOptions(version="1.0.0"), lines, REAL_BUILDERS)
    seen: list[str] = []
    problems: list[str] = []
    stop = threading.Event()
    watcher = Registry(hubs.open)

    def poll() -> None:  # a tag must never name an index with a platform missing
        while not stop.is_set():
            data = None
            if watcher.manifest_exists(f"rel-full-{RUN}/meshctl", "1.0.0") is not None:
                data, _, digest = watcher.get_manifest(f"rel-full-{RUN}/meshctl", "1.0.0")
                seen.append(digest)
            if data is None:
                continue
            entries = json.loads(data)["manifests"]
            if len(entries) != len(PLATFORMS):
                problems.append(f"{len(entries)} platforms")
            for entry in entries:
                if watcher.manifest_exists(f"rel-full-{RUN}/meshctl", entry["digest"]) is None:
                    problems.append(f"{entry['digest']} missing")

    thread = threading.Thread(target=poll)
    thread.start()
    try:
        release(ctx)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert [(r.name, r.status) for r in ctx.results] == [
        ("preflight", "ran"),
        ("build", "ran"),
        ("validate", "ran"),
        ("stage", "ran"),
        ("publish", "ran"),
        ("verify", "ran"),
    ]
    folder = repo / "dist" / "release" / "1.0.0"
    staged = json.loads((folder / "release.json").read_text())
    assert staged["revision"] == ctx.stamp.revision
    images = {a["binary"]: a for a in staged["artifacts"] if a["kind"] == "image"}
    assert sorted(images) == ["mesh-agent", "meshctl"]
    assert problems == []
    assert set(seen) <= {images["meshctl"]["digest"]}
    # Validate smoke-ran every zipapp that runs here and each host-platform image.
    smoked = [line for line in lines if line.startswith(("smoke ", "image smoke "))]
    assert any(x.startswith("smoke meshctl-1.0.0") and "1.0.0" in x for x in smoked), lines
    assert any(x.startswith("smoke mesh-agent-1.0.0-linux_amd64.pyz") for x in smoked), lines
    for binary in ("meshctl", "mesh-agent"):
        assert any(
            x.startswith(f"image smoke {binary} ({binary}-1.0.0-linux_amd64.tar) on linux/amd64")
            and "1.0.0" in x
            for x in smoked
        ), lines
    zipapps = sorted(Path(a["path"]).name for a in staged["artifacts"] if a["kind"] == "zipapp")
    assert zipapps == [
        "mesh-agent-1.0.0-linux_amd64.pyz",
        "mesh-agent-1.0.0-linux_arm64.pyz",
        "meshctl-1.0.0.pyz",
    ]
    # A release archive per platform: the universal meshctl zipapp in both, each
    # mesh-agent one in its own; each listed with its digest and in SHA256SUMS.
    archives = {Path(a["path"]).name: a for a in staged["artifacts"] if a["kind"] == "archive"}
    assert sorted(archives) == [
        "mesh-agent-1.0.0-linux-amd64.tar.gz",
        "mesh-agent-1.0.0-linux-arm64.tar.gz",
        "meshctl-1.0.0-linux-amd64.tar.gz",
        "meshctl-1.0.0-linux-arm64.tar.gz",
    ]
    sums = (folder / "SHA256SUMS").read_text()
    for name, art in archives.items():
        assert art["sha256"] == hashlib.sha256((folder / art["path"]).read_bytes()).hexdigest()
        assert f"{art['sha256']}  archives/{name}" in sums
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    subprocess.run(
        ["tar", "-xzf", str(folder / "archives" / "meshctl-1.0.0-linux-amd64.tar.gz")],
        cwd=unpacked,
        check=True,
    )
    top = unpacked / "meshctl-1.0.0-linux-amd64"
    assert sorted(p.name for p in top.iterdir()) == ["README.txt", "meshctl"]
    ran = subprocess.run(
        [str(top / "meshctl"), "--version"], check=False, capture_output=True, text=True
    )
    assert ran.returncode == 0 and "1.0.0" in ran.stdout, ran.stderr
    for art in images.values():  # the image builder names arm64's variant, as docker does
        assert sorted(art["platform"]) == ["linux/amd64", "linux/arm64/v8"]
        assert [m["platform"] for m in art["manifests"]] == art["platform"]
    # skopeo, an independent client, sees every tag on both hubs.
    for binary, art in images.items():
        for hub, creds in ((hubs.open, None), (hubs.basic.host, f"{USER}:{PASSWORD}")):
            for tag in ("1.0.0", "latest"):
                raw = skopeo_raw(f"{hub}/rel-full-{RUN}/{binary}:{tag}", creds)
                assert "sha256:" + hashlib.sha256(raw).hexdigest() == art["digest"]
    # SHA256SUMS checks out with sha256sum from the folder.
    check = subprocess.run(
        ["sha256sum", "--strict", "-c", "SHA256SUMS"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "release.json: OK" in check.stdout
    # An SBOM per zipapp and image platform, valid CycloneDX; mesh-agent's list its
    # own wheel, its in-repo library and PyYAML (tests/integration/test_sbom_contents.py
    # compares them with the artifacts' contents).
    validator = JsonStrictValidator(SchemaVersion.V1_6)
    sboms = {Path(a["path"]).name: a for a in staged["artifacts"] if a["kind"] == "sbom"}
    assert len(sboms) == 3 + 2 * 2  # 3 zipapps, 2 images x 2 platforms
    for name in sboms:
        assert validator.validate_str((folder / "sbom" / name).read_text()) is None
    agent = json.loads((folder / "sbom" / "mesh-agent-1.0.0-linux_arm64.cdx.json").read_text())
    assert sorted(c["name"].lower().replace("_", "-") for c in agent["components"]) == [
        "mesh-agent",
        "mesh-config",
        "pyyaml",
    ]
    assert "ctl: notes" in (folder / "CHANGELOG.md").read_text()
    # pip installs the wheels from the index, with the in-repo libraries they require
    # (released with them: mesh-api for meshctl, mesh-config for mesh-agent).
    wheels = sorted(Path(a["path"]).name for a in staged["artifacts"] if a["kind"] == "wheel")
    assert [w.split("-")[0] for w in wheels] == ["mesh_agent", "mesh_api", "mesh_config", "meshctl"]
    target = tmp_path / "installed"
    pip = [sys.executable, "-m", "pip", "install", "--target", str(target)]
    pip += ["--index-url", pypiserver.url + "simple/", "--no-cache-dir", "meshctl==1.0.0"]
    done = subprocess.run(
        pip,
        check=False,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "PIP_FIND_LINKS": "",
            "PIP_EXTRA_INDEX_URL": "",
            "PIP_CONFIG_FILE": os.devnull,
        },
    )
    assert done.returncode == 0, done.stderr
    assert any(p.name.startswith("meshctl-1.0.0") for p in target.iterdir())
    assert any(p.name.startswith("mesh_api-1.0.0") for p in target.iterdir())
    # Released: a second run stops in preflight, before building anything.
    with pytest.raises(UsageError, match="already released"):
        release(context(repo, env, ReleaseOptions(version="1.0.0")))


def test_snapshot_and_dry_run_publish_nothing(
    hubs: Hubs, pypiserver: PackageServer, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    env = release_env(hubs, pypiserver, f"rel-nothing-{RUN}")
    before_index = index_files(pypiserver)
    before_tags = tag_digests(hubs, f"rel-nothing-{RUN}", ("3.0.0", "latest"))
    assert set(before_tags.values()) == {None}
    snap = context(repo, env, ReleaseOptions(version="3.0.0", snapshot=True))
    release(snap)
    assert ".dev" in snap.stamp.version
    assert [r.status for r in snap.results] == ["ran"] * 4 + ["skipped"] * 2
    assert (repo / "dist" / "release" / snap.stamp.version / "release.json").is_file()
    lines: list[str] = []
    dry = context(repo, env, ReleaseOptions(version="3.0.0", dry_run=True), lines)
    release(dry)
    assert sum(line.startswith("would push image") for line in lines) == 4  # 2 images x 2 hubs
    assert sum(line.startswith("would upload wheel") for line in lines) == 4  # 2 + libraries
    assert tag_digests(hubs, f"rel-nothing-{RUN}", ("3.0.0", "latest")) == before_tags
    assert index_files(pypiserver) == before_index
    assert not (repo / "dist" / "release" / "3.0.0").exists()


def test_wheels_built_only_for_images_are_not_released(
    hubs: Hubs, pypiserver: PackageServer, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", MANIFEST.replace("[wheel, image]", "[image]"))
    env = release_env(hubs, pypiserver, f"rel-imgonly-{RUN}")
    for name in ("SHIPYARD_INDEX_URL", "SHIPYARD_INDEX_USER", "SHIPYARD_INDEX_PASSWORD"):
        env.pop(name)
    lines: list[str] = []
    ctx = context(repo, env, ReleaseOptions(version="7.0.0", dry_run=True), lines)
    release(ctx)  # no package index is needed: no wheel is a declared output
    assert list((repo / "dist" / "wheels").glob("*.whl"))  # built, as the images' input
    staged = json.loads((ctx.release_dir / "release.json").read_text())
    assert {a["kind"] for a in staged["artifacts"]} == {"image", "sbom"}
    assert sum(line.startswith("would push image") for line in lines) == 4
    assert not any("wheel" in line for line in lines if line.startswith("would"))
