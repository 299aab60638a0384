"""`docker load` tarballs written on request from a built image's layout."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from shipyard.builders.image import ImageBuilder
from shipyard.builders.image.archives import archive_path, host_platform, write_archive
from shipyard.engine.run import wrapped
from shipyard.errors import UsageError
from shipyard.oci.layout import read_layout
from shipyard.oci.model import Platform
from tests.unit.builders.image.test_image_builder import StandIn, _action, _ctx, _deps, repo

__all__ = ["repo"]  # the fixture, imported for its name


def _built(repo: Path) -> Path:
    wrapped(ImageBuilder(StandIn())).run(_action(repo), _ctx(repo), _deps(repo))
    return repo / "dist"


def test_a_build_writes_no_tarball_and_one_is_written_on_request(repo: Path) -> None:
    dist = _built(repo)
    assert not list((dist / "images").glob("*.tar"))
    tarball, sha256 = write_archive(dist, "app", "linux/amd64")
    assert tarball == archive_path(dist, "app", "linux/amd64")
    assert tarball.name == "app-1.2.3-linux_amd64.tar"
    ((image, _),) = read_layout(dist / "images" / "app", [Platform.parse("linux/amd64")]).values()
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
        handle = tar.extractfile("manifest.json")
        assert handle is not None
        (manifest,) = json.load(handle)
    assert manifest["RepoTags"] == ["app:1.2.3-amd64", "app:1.2.3-linux_amd64"]
    assert {f"blobs/sha256/{x.descriptor.digest[7:]}" for x in image.layers} <= names
    assert len(sha256) == 64


def test_the_same_layout_gives_the_same_tarball_bytes(repo: Path, tmp_path: Path) -> None:
    dist = _built(repo)
    _, first = write_archive(dist, "app", "linux/arm64", dest=tmp_path / "a.tar")
    _, again = write_archive(dist, "app", "linux/arm64", dest=tmp_path / "b.tar")
    assert first == again
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()


def test_an_image_not_built_or_not_for_the_platform_is_a_usage_error(repo: Path) -> None:
    with pytest.raises(UsageError, match="build it first"):
        write_archive(repo / "dist", "app", "linux/amd64")
    dist = _built(repo)
    with pytest.raises(UsageError, match="has no linux/s390x image"):
        write_archive(dist, "app", "linux/s390x")
    with pytest.raises(UsageError, match="variant debug of app"):
        write_archive(dist, "app", "linux/amd64", variant="debug")


def test_the_host_platform_is_a_linux_platform() -> None:
    assert host_platform().startswith("linux/")
