"""The license file a release archive ships comes from the checkout: it follows the rules
sources follow (issue: security, item 3).

`LICENSE -> /proc/self/environ`, committed, put the environment of the release (its
secrets) into every per-platform archive. The license is found, and checked, the way a
wheel's source files are: a symlink only while it stays inside the repository, a
regular file only. The function that reads it is tested in
tests/unit/files/test_shipped.py.
"""

from __future__ import annotations

import dataclasses
import os
import tarfile
from pathlib import Path

import pytest

from shipyard.engine.plan import Action
from shipyard.errors import UsageError
from shipyard.release import ReleaseContext, ReleaseOptions
from shipyard.release.archives import find_license, members, write_release_archive
from shipyard.release.preflight import Preflight
from shipyard.release.staging import StageRelease
from tests.unit.files.test_sources_hostile import within
from tests.unit.release.test_archives import EPOCH, _zipapp
from tests.unit.release.test_pipeline import make_context

SECRET = "release-secret-3b9d41"


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> str:
    """A secret in this process's environment, as a release in CI has its tokens."""
    monkeypatch.setenv("SHIPYARD_TEST_TOKEN", SECRET)
    return SECRET


def test_a_license_linked_to_the_environment_is_refused_not_archived(
    tmp_path: Path, secret_env: str
) -> None:
    """Regression: find_license took `LICENSE -> /proc/self/environ` for a license
    (`is_file()` follows links) and the archive held the environment, secrets and all."""
    if not os.path.isfile("/proc/self/environ"):
        pytest.skip("no /proc here")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "LICENSE").symlink_to("/proc/self/environ")
    with pytest.raises(UsageError, match="leaves the repository") as caught:
        find_license(repo)
    assert str(repo / "LICENSE") in str(caught.value)
    assert "regular file" in str(caught.value)  # and the fix
    assert secret_env not in str(caught.value)


def test_an_archive_never_reads_a_license_linked_out_of_its_folder(
    tmp_path: Path, secret_env: str
) -> None:
    """Regression: members() read the license with `read_bytes()`, through any symlink:
    a license file handed to it directly still copied a file from outside into the
    archive."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "token").write_text(secret_env)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "LICENSE").symlink_to(outside / "token")
    pyz = _zipapp(tmp_path)
    with pytest.raises(UsageError, match="leaves the repository"):
        members(pyz, "app", "1.4.0", "linux/amd64", repo / "LICENSE")
    with pytest.raises(UsageError, match="leaves the repository"):
        write_release_archive(
            tmp_path / "out",
            zipapp=pyz,
            binary="app",
            version="1.4.0",
            platform="linux/amd64",
            license_file=repo / "LICENSE",
            epoch=EPOCH,
        )
    assert not (tmp_path / "out").exists()  # refused before any archive was begun


def test_a_license_folder_is_refused_not_skipped(tmp_path: Path) -> None:
    """Regression: a folder named LICENSE was passed over without a word (`is_file()`
    is false), so the archives went out with no license at all."""
    (tmp_path / "LICENSE").mkdir()
    (tmp_path / "LICENSE" / "MIT.txt").write_text("MIT\n")
    with pytest.raises(UsageError, match="is a folder") as caught:
        find_license(tmp_path)
    assert str(tmp_path / "LICENSE") in str(caught.value)


def test_a_license_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """Regression: a named pipe called LICENSE was passed over without a word; reading
    one would block the release for ever."""
    os.mkfifo(tmp_path / "LICENSE")
    got = within(20.0, lambda: find_license(tmp_path))
    assert isinstance(got, UsageError), got
    assert "named pipe" in str(got) and str(tmp_path / "LICENSE") in str(got)


def test_a_license_linked_inside_the_repository_is_shipped(tmp_path: Path) -> None:
    """As for sources, a symlink that stays inside the repository is read through."""
    (tmp_path / "legal").mkdir()
    (tmp_path / "legal" / "LICENSE.txt").write_text("Apache License 2.0\n")
    (tmp_path / "LICENSE").symlink_to("legal/LICENSE.txt")
    found = find_license(tmp_path)
    assert found == tmp_path / "LICENSE"
    path = write_release_archive(
        tmp_path / "out",
        zipapp=_zipapp(tmp_path),
        binary="app",
        version="1.4.0",
        platform="linux/amd64",
        license_file=found,
        epoch=EPOCH,
    )
    with tarfile.open(path) as tar:
        entry = tar.getmember("app-1.4.0-linux-amd64/LICENSE")
        handle = tar.extractfile(entry)
        assert entry.isreg() and handle is not None
        assert handle.read() == b"Apache License 2.0\n"


def _with_zipapp(ctx: ReleaseContext) -> ReleaseContext:
    """`ctx` with a plan that builds a zipapp, so the release makes archives."""
    action = Action("zipapp:app", "zipapp", ("app",), ctx.root, ("linux/amd64",))
    ctx.plan = dataclasses.replace(ctx.plan, actions=(action,))
    return ctx


def test_preflight_refuses_a_license_linked_out_before_the_build(tmp_path: Path) -> None:
    """Regression: the license was first looked at in stage, after the whole build, so a
    release learnt of a bad one only when everything was built."""
    (tmp_path / "token").write_text(SECRET)
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "COPYING").symlink_to(tmp_path / "token")
    ctx = _with_zipapp(make_context(tmp_path / "repo", ReleaseOptions(snapshot=True)))
    with pytest.raises(UsageError, match="leaves the repository") as caught:
        Preflight().run(ctx)
    assert caught.value.exit_code == 2
    assert str(tmp_path / "repo" / "COPYING") in str(caught.value)


def test_a_release_without_archives_never_reads_the_license(tmp_path: Path) -> None:
    """Only release archives ship the license: a release with no zipapp (here, nothing
    to build at all) is not stopped by one it would never copy, in preflight or stage."""
    (tmp_path / "LICENSE").mkdir()
    ctx = make_context(tmp_path, ReleaseOptions(snapshot=True))
    Preflight().run(ctx)
    StageRelease().run(ctx)
    assert (ctx.release_dir / "release.json").is_file()
    assert not (ctx.release_dir / "archives").exists()
