"""The graph tests' repository, made once and copied for each test that changes it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.unit.engine.graph._acme import make_acme


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed repository of `_acme`."""
    folder = tmp_path_factory.mktemp("acme") / "repo"
    folder.mkdir()
    return make_acme(folder)


@pytest.fixture
def acme(template: Path, tmp_path: Path) -> Path:
    """A copy of it for one test to change."""
    return Path(shutil.copytree(template, tmp_path / "repo", symlinks=True))
