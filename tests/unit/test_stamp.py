"""Versions from git describe, overrides, and the clock."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shipyard.errors import UsageError
from shipyard.release import ReleaseOptions
from shipyard.release.pipeline import prepare_release
from shipyard.stamp import ZIP_EPOCH, choose_version, read_stamp, version_from_describe


@pytest.mark.parametrize(
    ("describe", "count", "dirty", "expected"),
    [
        ("v1.4.0-0-gabc1234", 9, False, "1.4.0"),
        ("1.4.0-3-gabc1234", 9, False, "1.4.1.dev3+gabc1234"),
        ("v2.0-1-gabc1234", 9, True, "2.0.1.dev1+gabc1234.dirty"),
        ("v1.4.0-0-gabc1234", 9, True, "1.4.0+dirty"),
        (None, 7, False, "0.0.0.dev7+gabc1234"),
        ("release-x-2-gabc1234", 5, False, "0.0.0.dev5+gabc1234"),
    ],
)
def test_version_from_describe(
    describe: str | None, count: int, dirty: bool, expected: str
) -> None:
    assert version_from_describe(describe, "abc1234", count, dirty) == expected


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.invalid")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "f").write_text("1")
    _git(tmp_path, "add", "f")
    env_date = "2024-01-02T03:04:05+00:00"
    subprocess.run(
        ["git", "-C", str(tmp_path), "commit", "-qm", "one"],
        check=True,
        env={"GIT_COMMITTER_DATE": env_date, "GIT_AUTHOR_DATE": env_date, "PATH": "/usr/bin:/bin"},
    )
    return tmp_path


def test_git_version_and_commit_clock(repo: Path) -> None:
    stamp = read_stamp(repo, "git", {})
    assert stamp.version.startswith("0.0.0.dev1+g")
    assert stamp.epoch == 1704164645
    assert stamp.created == "2024-01-02T03:04:05Z"
    assert not stamp.dirty
    _git(repo, "tag", "v1.2.0")
    assert read_stamp(repo, "git", {}).version == "1.2.0"
    (repo / "f").write_text("2")
    dirty = read_stamp(repo, "git", {})
    assert dirty.dirty and dirty.version == "1.2.0+dirty"


def test_precedence_flag_then_env_then_manifest(repo: Path) -> None:
    assert read_stamp(repo, "3.0", {}).version == "3.0"
    assert read_stamp(repo, "3.0", {"VERSION": "4.0"}).version == "4.0"
    assert read_stamp(repo, "3.0", {"VERSION": "4.0"}, "5.0").version == "5.0"
    assert read_stamp(repo, "3.0", {"SOURCE_DATE_EPOCH": "1700000000"}).epoch == 1700000000


def test_image_tag_replaces_plus() -> None:
    assert version_from_describe(None, "abc", 1, False).replace("+", "-") == "0.0.0.dev1-gabc"


@pytest.mark.parametrize(
    ("declared", "env", "flag", "message"),
    [
        ("git", {}, "not-a-version", "--version: 'not-a-version' is not a PEP 440 version"),
        ("git", {"VERSION": "1.x"}, None, "$VERSION: '1.x' is not a PEP 440 version"),
        ("nope", {}, None, "project.version in binaries.yaml: 'nope'"),
        ("1.0", {"SOURCE_DATE_EPOCH": "soon"}, None, "$SOURCE_DATE_EPOCH='soon'"),
    ],
)
def test_bad_versions_are_usage_errors(
    repo: Path, declared: str, env: dict[str, str], flag: str | None, message: str
) -> None:
    with pytest.raises(UsageError, match=None) as caught:
        read_stamp(repo, declared, env, flag)
    assert message in str(caught.value)


def test_git_version_without_git_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no git commit"):
        read_stamp(tmp_path, "git", {})
    assert read_stamp(tmp_path, "1.0", {}).epoch == ZIP_EPOCH


def test_snapshot_takes_git_describe_as_a_dev_version(repo: Path) -> None:
    """A snapshot ignores --version, $VERSION and a literal project.version."""
    _git(repo, "tag", "v1.2.0")
    stamp = read_stamp(repo, "3.0", {"VERSION": "4.0"}, "5.0", snapshot=True)
    assert stamp.version == "1.2.0.dev0"
    assert choose_version("3.0", {"VERSION": "4.0"}, "5.0") == ("5.0", "--version")
    assert choose_version("3.0", {"VERSION": "4.0"}) == ("4.0", "$VERSION")
    assert choose_version("git", {}, snapshot=True)[0] == "git"


@pytest.mark.parametrize(("env", "flag"), [({}, "2.0"), ({"VERSION": "2.1"}, None), ({}, None)])
def test_release_chooses_the_version_as_build_does(
    tmp_path: Path, env: dict[str, str], flag: str | None
) -> None:
    """`release` and `build` stamp the same version, even with no git commit here."""
    manifest = tmp_path / "binaries.yaml"
    manifest.write_text(
        "schema: 1\nproject:\n  name: demo\n  version: '1.5'\n"
        "binaries:\n  app:\n    source: app\n    entrypoint: app.main:main\n"
    )
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "pyproject.toml").write_text("[project]\nname = 'app'\nversion = '1'\n")
    built = read_stamp(tmp_path, "1.5", env, flag).version
    context = prepare_release(manifest, ReleaseOptions(version=flag), env=env)
    assert context.stamp.version == built
