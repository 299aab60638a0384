"""Publish re-checks every staged file against release.json before it sends anything."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from shipyard.errors import UsageError
from shipyard.manifest import Binary, Image
from shipyard.oci.remote.registry import Registry
from shipyard.release import ReleaseOptions
from shipyard.release.context import ReleaseContext
from shipyard.release.publish import Publish, check_staged
from shipyard.release.staged import parse_release
from shipyard.release.staging import sha256sums
from tests.unit.release.test_pipeline import make_context

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _blob(layout: Path, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256" / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def publishing_context(tmp_path: Path, options: ReleaseOptions) -> ReleaseContext:
    """make_context's, its plan selecting the binary `demo` with an image for the hub
    `stage` writes (publish pushes only where the manifest says)."""
    ctx = make_context(tmp_path, options)
    image = Image(hubs=("127.0.0.1:9/demo",), tags=("latest",))
    demo = Binary("demo", tmp_path / "demo", "demo:main", ("wheel", "image"), (), (), image, ())
    ctx.plan = replace(ctx.plan, binaries=(demo,))
    return ctx


def stage(folder: Path, version: str = "1.2.3+local.1") -> dict[str, Any]:
    """A staged release with one wheel and a one-platform image layout; its release.json
    (of `version`: by default make_context's)."""
    wheel = folder / "wheels" / "demo-1.0.0-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(b"a wheel")
    layout = folder / "images" / "demo"
    config = _blob(layout, b'{"architecture":"amd64","os":"linux"}')
    layer = _blob(layout, b"a layer")
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer}],
        }
    ).encode()
    root = _blob(layout, manifest)
    top = {"schemaVersion": 2, "manifests": [{"mediaType": OCI_MANIFEST, **root}]}
    (layout / "index.json").write_text(json.dumps(top))
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    staged = {
        "version": version,
        "artifacts": [
            {
                "kind": "wheel",
                "path": "wheels/demo-1.0.0-py3-none-any.whl",
                "sha256": hashlib.sha256(b"a wheel").hexdigest(),
            },
            {
                "kind": "image",
                "binary": "demo",
                "path": "images/demo",
                "digest": root["digest"],
                "manifests": [],
                "hubs": ["127.0.0.1:9/demo"],
                "tags": [version.replace("+", "-"), "latest"],
            },
        ],
    }
    (folder / "release.json").write_text(json.dumps(staged))
    return staged


def test_untouched_staged_files_pass(tmp_path: Path) -> None:
    staged = stage(tmp_path)
    images = check_staged(tmp_path, parse_release(staged))
    assert list(images) == ["images/demo"]
    assert images["images/demo"].root[0] == staged["artifacts"][1]["digest"]


@pytest.mark.parametrize("target", ["wheel", "layer", "manifest", "index"])
def test_a_file_changed_after_staging_is_refused_by_name(tmp_path: Path, target: str) -> None:
    staged = stage(tmp_path)
    layout = tmp_path / "images" / "demo"
    if target == "wheel":
        changed = tmp_path / "wheels" / "demo-1.0.0-py3-none-any.whl"
        changed.write_bytes(b"a wheel with a back door")
    elif target == "layer":
        changed = layout / "blobs" / "sha256" / hashlib.sha256(b"a layer").hexdigest()
        changed.write_bytes(b"a layer with a back door")
    elif target == "manifest":
        changed = layout / "blobs" / "sha256" / staged["artifacts"][1]["digest"].split(":")[1]
        changed.write_bytes(changed.read_bytes() + b"\n")
    else:  # index.json names another (self-consistent) image than release.json
        changed = layout / "index.json"
        doc = json.loads(
            (layout / "blobs" / "sha256" / staged["artifacts"][1]["digest"][7:]).read_bytes()
        )
        other = _blob(layout, json.dumps({**doc, "annotations": {"a": "b"}}).encode())
        top = {"schemaVersion": 2, "manifests": [{"mediaType": OCI_MANIFEST, **other}]}
        changed.write_text(json.dumps(top))
    with pytest.raises(UsageError) as caught:
        check_staged(tmp_path, parse_release(staged))
    assert caught.value.exit_code == 2
    assert str(changed) in str(caught.value)
    assert "--clean" in str(caught.value)


@pytest.mark.parametrize("path", ["../outside.whl", "/etc/passwd", "wheels/../../x"])
def test_a_path_outside_the_staged_folder_is_refused(tmp_path: Path, path: str) -> None:
    staged = stage(tmp_path / "release")
    staged["artifacts"][0]["path"] = path
    with pytest.raises(UsageError, match="outside"):
        check_staged(tmp_path / "release", parse_release(staged))


def test_publish_refuses_a_tampered_file_before_contacting_anything(tmp_path: Path) -> None:
    contacted: list[str] = []

    def registry_for(host: str) -> Registry:
        contacted.append(host)
        raise AssertionError(f"{host} was contacted")

    ctx = publishing_context(tmp_path, ReleaseOptions(version="1.2.3"))
    ctx.registry_for = registry_for
    folder = ctx.release_dir
    ctx.staged = parse_release(stage(folder))
    (folder / "SHA256SUMS").write_text(sha256sums(folder))
    (folder / "wheels" / "demo-1.0.0-py3-none-any.whl").write_bytes(b"tampered")
    with pytest.raises(UsageError, match=r"demo-1\.0\.0-py3-none-any\.whl has sha256 .* says"):
        Publish().run(ctx)
    assert contacted == []
    assert not (folder / "publish.journal").exists()


def test_publish_goes_only_to_the_hubs_and_tags_the_manifest_gives(tmp_path: Path) -> None:
    """Review finding 3: publish pushed to every hub release.json listed, with the push
    credentials; a hub added to release.json (and SHA256SUMS rewritten: an unsigned
    release has no signature to break) received them. Now every image's hubs and
    tags must be the manifest's, before anything is contacted."""
    contacted: list[str] = []

    def registry_for(host: str) -> Registry:
        contacted.append(host)
        raise AssertionError(f"{host} was contacted")

    ctx = publishing_context(tmp_path, ReleaseOptions(version="1.2.3"))
    ctx.registry_for = registry_for
    folder = ctx.release_dir
    staged = stage(folder)
    for change in ({"hubs": ["127.0.0.1:9/demo", "127.0.0.1:5999/attacker"]}, {"tags": ["2.0"]}):
        art = {**staged["artifacts"][1], **change}
        (folder / "release.json").write_text(
            json.dumps({**staged, "artifacts": [staged["artifacts"][0], art]})
        )
        (folder / "SHA256SUMS").write_text(sha256sums(folder))
        with pytest.raises(UsageError, match=r"but the manifest gives \['127\.0\.0\.1:9/demo'\]"):
            Publish().run(ctx)
    assert contacted == []


def test_a_wheel_is_uploaded_from_a_private_copy_never_through_a_link(tmp_path: Path) -> None:
    """Review finding 6: the "private copy" of a wheel was a symlink when the staged
    wheel was one (copyfile with follow_symlinks=False), so the bytes hashed and the
    bytes twine read could differ."""
    from shipyard.release.index import PackageIndex, PackageIndexError

    target = tmp_path / "elsewhere.whl"
    target.write_bytes(b"a wheel")
    wheel = tmp_path / "demo-1.0.0-py3-none-any.whl"
    wheel.symlink_to(target)
    index = PackageIndex("http://127.0.0.1:9/", "u", "p")
    digest = hashlib.sha256(b"a wheel").hexdigest()
    with pytest.raises(PackageIndexError, match=r"cannot read it"):
        index.upload(wheel, digest)
    fifo = tmp_path / "fifo-1.0.0-py3-none-any.whl"
    os.mkfifo(fifo)
    with pytest.raises(PackageIndexError, match=r"not a regular file"):
        index.upload(fifo, digest)
