"""`shipyard load`: a built image's `docker load` tarball, written from its layout."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from shipyard.builders.image import ImageBuilder
from shipyard.cli import main
from shipyard.engine.run import wrapped
from tests.unit.builders.image.test_image_builder import StandIn, _action, _ctx, _deps, repo
from tests.unit.cli.test_cli import MANIFEST

__all__ = ["repo"]  # the fixture, imported for its name


def _manifest(repo: Path) -> str:
    (repo / "app").mkdir(exist_ok=True)
    (repo / "app" / "pyproject.toml").write_text("[project]\nname = 'app'\n")
    (repo / "binaries.yaml").write_text(MANIFEST)
    return str(repo / "binaries.yaml")


def test_load_output_writes_the_tarball_and_loads_nothing(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = _manifest(repo)
    wrapped(ImageBuilder(StandIn())).run(_action(repo), _ctx(repo), _deps(repo))
    out = tmp_path / "app-arm64.tar"
    code = main(["-f", manifest, "load", "app", "--platform", "linux/arm64", "--output", str(out)])
    assert code == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    with tarfile.open(out) as tar:
        handle = tar.extractfile("manifest.json")
        assert handle is not None
        assert json.load(handle)[0]["RepoTags"][0] == "app:1.2.3-arm64"


def test_load_of_an_image_not_built_is_exit_2(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["-f", _manifest(repo), "load", "app", "--output", str(tmp_path / "x")])
    assert code == 2
    assert "build it first" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
