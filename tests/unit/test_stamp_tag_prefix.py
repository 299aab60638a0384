"""Version tags with a prefix (issue 31, item 5): `python-v0.5.3` for a workspace in
python/, `<project>/v1.2.3` per project, configurable like GoReleaser's monorepo
`tag_prefix`; and a workspace below the git root, whose changed files are its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from shipyard.engine.inputs import Inputs
from shipyard.engine.stamps import input_stamps
from shipyard.manifest import load_manifest
from shipyard.stamp import read_stamp, tag_version
from tests.unit._dynamic import git_commit


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


@pytest.mark.parametrize(
    ("tag", "prefix", "expected"),
    [
        ("v1.2.3", "", "1.2.3"),
        ("1.2", "", "1.2"),
        ("python-v0.5.3", "", "0.5.3"),
        ("acme-cli/v1.2.3", "", "1.2.3"),
        ("acme-cli-v1.2.3rc1", "", "1.2.3rc1"),
        ("release-2024.1", "", "2024.1"),
        ("python-v0.5.3", "python-v", "0.5.3"),
        ("acme-cli/v1.2.3", "acme-cli/v", "1.2.3"),
        ("dotnet-v0.5.3", "python-v", None),  # another tree's tag
        ("python-vnext", "python-v", None),
        ("nightly", "", None),
        ("release-x", "", None),
    ],
)
def test_a_tag_names_the_version_after_its_prefix(
    tag: str, prefix: str, expected: str | None
) -> None:
    found = tag_version(tag, prefix)
    assert found == (Version(expected) if expected else None)


@pytest.fixture
def monorepo(tmp_path: Path) -> Path:
    """A git repository with python/ (two projects) beside dotnet/, tagged per tree and
    per project, each tag on its own commit."""
    for folder in ("python/cli", "python/core", "dotnet"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "f").write_text("1")
    git_commit(tmp_path, "one")
    _git(tmp_path, "tag", "python-v0.5.3")
    _git(tmp_path, "tag", "acme-core/v0.7.5")
    (tmp_path / "python/cli/f").write_text("2")
    git_commit(tmp_path, "cli")
    _git(tmp_path, "tag", "acme-cli/v1.2.3")
    (tmp_path / "dotnet/f").write_text("2")
    git_commit(tmp_path, "dotnet")
    _git(tmp_path, "tag", "dotnet-v9.0.0")
    return tmp_path


def test_the_repositorys_version_reads_only_tags_with_its_prefix(monorepo: Path) -> None:
    python = monorepo / "python"
    # The nearest tag is dotnet's: with the prefix, python's is the one read.
    assert read_stamp(python, "git", {}, tag_prefix="python-v").version.startswith("0.5.4.dev2+g")
    assert read_stamp(python, "git", {}).version == "9.0.0"  # any prefix: the nearest tag


def test_a_package_tag_under_the_same_prefix_is_not_the_repositorys(monorepo: Path) -> None:
    """agent-framework tags python-1.9.0 for the workspace and python-devui-1.0.0b1
    for one package: `python-` reads the first kind only."""
    python = monorepo / "python"
    _git(monorepo, "tag", "python-1.9.0", "HEAD~1")
    _git(monorepo, "tag", "python-devui-1.0.0b1", "HEAD")  # nearer, and not ours
    assert read_stamp(python, "git", {}, tag_prefix="python-").version.startswith("1.9.1.dev1+g")


def test_each_project_reads_its_own_tags(monorepo: Path) -> None:
    python = monorepo / "python"
    build = read_stamp(python, "git", {})
    groups = {
        "cli": Inputs(("cli",), tag_prefix="acme-cli/v"),
        "core": Inputs(("core",), tag_prefix="acme-core/v"),
    }
    stamps = input_stamps(python, build, groups, {})
    assert stamps["cli"].version == "1.2.3"  # its last change is the tagged commit
    assert stamps["core"].version == "0.7.5"


def test_changed_files_of_a_workspace_below_the_root_are_its_own(monorepo: Path) -> None:
    python = monorepo / "python"
    (monorepo / "dotnet/f").write_text("dirty")  # another tree: the repository is dirty
    build = read_stamp(python, "git", {})
    assert build.dirty
    assert build.changed == ()  # but nothing of the workspace changed
    stamps = input_stamps(python, build, {"cli": Inputs(("cli",), tag_prefix="acme-cli/v")}, {})
    assert stamps["cli"].version == "1.2.3" and not stamps["cli"].dirty
    (python / "cli/f").write_text("dirty")
    build = read_stamp(python, "git", {})
    assert build.changed == ("cli/f",)
    stamps = input_stamps(python, build, {"cli": Inputs(("cli",), tag_prefix="acme-cli/v")}, {})
    assert stamps["cli"].version == "1.2.3+dirty"


def test_the_manifest_fills_in_the_project(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "1"\n')
    (tmp_path / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: acme, tag_prefix: '{project}/v'}\n"
        "binaries: {x: {source: ., entrypoint: 'x:main'}}\n"
    )
    project = load_manifest(tmp_path / "binaries.yaml", {}).project
    assert project.tag_prefix_for("acme-cli") == "acme-cli/v"
    assert project.tag_prefix_for() == "acme/v"


def test_a_glob_in_the_prefix_is_refused_at_its_place(tmp_path: Path) -> None:
    (tmp_path / "binaries.yaml").write_text(
        "schema: 1\nproject:\n  name: acme\n  tag_prefix: 'py*'\n"
        "binaries: {x: {source: ., entrypoint: 'x:main'}}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "shipyard", "check"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "binaries.yaml:4:15" in done.stderr and "tag_prefix" in done.stderr
    assert "Traceback" not in done.stderr
