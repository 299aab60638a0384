"""shipyard.builders.origin: a requirement whose name is a project of the repository is
never satisfied from an index, whatever path reaches it (the backstop behind the graph).

Regression (security issue, item 4): when a third-party package required a name that is a
project of the repository, the installer took the index's copy (perhaps an attacker's)
and the zipapp shipped it. The real installer runs here, offline, against a find-links
folder standing in for the index.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from shipyard.artifacts import Artifact, Distribution, Metadata
from shipyard.builders.zipapp import ZipappBuilder, ZipappOptions
from shipyard.builders.zipapp._boot.layout import BUILD_INFO
from shipyard.engine.plan import Action
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import BuildContext
from shipyard.errors import BuildError
from shipyard.stamp import Stamp
from shipyard.workspace import load_workspace
from tests.unit.builders.test_resolve import make_wheel, offline_env

EPOCH = 1_700_000_000
ACTION = Action(
    "zipapp:app", "zipapp", ("app",), Path("/src"), ("linux/amd64",), ("wheel:apps/app",),
    extras=("plus",), project="app",
)  # fmt: skip


def _ctx(tmp_path: Path) -> BuildContext:
    """The repository holds `app` and `acme-extra`; the index (find-links) holds
    `thirdparty`, which requires `acme-extra`, and an `acme-extra` 6.6.6 of its own."""
    root = tmp_path / "repo"
    for folder, name in (("apps/app", "app"), ("libs/extra", "acme-extra")):
        (root / folder).mkdir(parents=True)
        (root / folder / "pyproject.toml").write_text(
            f'[project]\nname = "{name}"\nversion = "1.0"\n'
        )
    links = tmp_path / "index"
    make_wheel(links, "thirdparty", "1.0", files={"thirdparty/__init__.py": ""},
               requires=["acme-extra"])  # fmt: skip
    make_wheel(links, "acme_extra", "6.6.6", files={"acme_extra/__init__.py": "WHO = 'index'\n"})
    stamp = Stamp("1.0", "0" * 16, False, EPOCH)
    env = offline_env(tmp_path, links)
    return BuildContext(root, root / "dist", stamp, "3.11", env, workspace=load_workspace(root))


def _wheel(folder: Path, name: str, **kwargs: object) -> Artifact:
    path = make_wheel(folder, name, "1.0", **kwargs)  # type: ignore[arg-type]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    metadata = Metadata(wheel=Distribution(name, "1.0"))
    return Artifact("wheel", "", "py3-none-any", path, digest, path.stat().st_size, metadata)


def _app(tmp_path: Path) -> Artifact:
    """The binary's wheel: its extra `plus` needs thirdparty."""
    files = {"app/__init__.py": "def main() -> int:\n    return 0\n"}
    return _wheel(tmp_path / "built", "app", files=files, extras={"plus": ["thirdparty"]})


def test_an_in_repo_name_reached_through_a_third_party_package_fails_the_build(
    tmp_path: Path,
) -> None:
    """Bug: the zipapp shipped the index's acme-extra 6.6.6."""
    ctx = _ctx(tmp_path)
    builder = wrapped(ZipappBuilder(lambda action: ZipappOptions("app:main")))
    with pytest.raises(BuildError) as caught:
        builder.run(ACTION, ctx, (_app(tmp_path),))
    message = str(caught.value)
    assert "acme_extra 6.6.6 was installed from an index" in message
    assert "`acme-extra` is a project of this repository (libs/extra)" in message
    assert "reached through app[plus] -> thirdparty -> acme-extra" in message
    assert not (ctx.dist / "zipapps").exists()


def test_the_repositorys_own_wheel_of_that_name_is_what_ships(tmp_path: Path) -> None:
    """With the repository's acme-extra handed to it, the build ships that one."""
    ctx = _ctx(tmp_path)
    own = _wheel(
        tmp_path / "built", "acme_extra", files={"acme_extra/__init__.py": "WHO = 'repo'\n"}
    )
    builder = wrapped(ZipappBuilder(lambda action: ZipappOptions("app:main")))
    (artifact,) = builder.run(ACTION, ctx, (_app(tmp_path), own)).outputs
    with zipfile.ZipFile(artifact.path) as archive:
        info = json.loads(archive.read(BUILD_INFO))
        assert archive.read("site/acme_extra/__init__.py") == b"WHO = 'repo'\n"
    assert info["distributions"]["acme_extra"] == "1.0"
    assert info["distributions"]["thirdparty"] == "1.0"
