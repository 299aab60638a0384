"""Per-action stamps asking git as little as a no-op build needs (issue 28 item 1):
no `describe` for commits when no tag describes HEAD, commit counts remembered for
one HEAD, and the same stamps as asking git everything."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from shipyard import stamp as stamp_module
from shipyard.engine import stamps as stamps_module
from shipyard.engine.inputs import Inputs
from shipyard.engine.stamps import input_stamps
from shipyard.stamp import read_stamp
from tests.unit._dynamic import git_commit


def _repo(root: Path) -> dict[str, Inputs]:
    """Two folders, each changed by its own commit, and a third commit on top."""
    for folder in ("a", "b", "c"):
        (root / folder).mkdir(parents=True)
        (root / folder / "x.py").write_text(f"X = '{folder}'\n")
        git_commit(root, folder)
    return {name: Inputs((name,)) for name in ("a", "b")}


def _asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """The git commands `input_stamps` runs, recorded as it runs them."""
    asked: list[tuple[str, ...]] = []
    real = stamp_module.git_outputs

    def recording(root: Path, *commands: tuple[str, ...], raw: bool = False) -> list[str | None]:
        asked.extend(commands)
        return real(root, *commands, raw=raw)

    monkeypatch.setattr(stamps_module, "git_outputs", recording)
    return asked


def test_without_a_tag_no_commit_is_described(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups = _repo(tmp_path)
    build = read_stamp(tmp_path, "git", {})
    assert build.described == ("", None, 3)
    # What git says when asked about every commit (the stamp knowing nothing of HEAD's tags).
    expected = input_stamps(tmp_path, dataclasses.replace(build, described=None), groups, {})
    asked = _asked(monkeypatch)
    found = input_stamps(tmp_path, build, groups, {})
    assert found == expected
    assert [found[n].version.split("+")[0] for n in ("a", "b")] == ["0.0.0.dev1", "0.0.0.dev2"]
    assert not [c for c in asked if c[0] == "describe"]


def test_with_a_tag_the_commits_are_described(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups = _repo(tmp_path)
    subprocess.run(["git", "-C", str(tmp_path), "tag", "1.0", "HEAD~1"], check=True)
    build = read_stamp(tmp_path, "git", {})
    assert build.described is not None and build.revision is not None
    assert build.described[1] == "1.0-1-g" + build.revision[:7]
    asked = _asked(monkeypatch)
    found = input_stamps(tmp_path, build, groups, {})
    assert found["a"].version.startswith("0.0.0.dev1+g")  # before the tag
    assert found["b"].version == "1.0"
    assert [c for c in asked if c[0] == "describe"]


def test_a_tag_prefix_other_than_the_builds_is_asked(tmp_path: Path) -> None:
    groups = _repo(tmp_path)
    subprocess.run(["git", "-C", str(tmp_path), "tag", "b/v2.0", "HEAD~1"], check=True)
    build = read_stamp(tmp_path, "git", {}, tag_prefix="a/v")
    assert build.described is not None and build.described[:2] == ("a/v", None)
    groups["b"] = Inputs(("b",), tag_prefix="b/v")
    assert input_stamps(tmp_path, build, groups, {})["b"].version == "2.0"


def test_counts_are_remembered_for_one_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups = _repo(tmp_path)
    memo = tmp_path / "stamps.json"
    build = read_stamp(tmp_path, "git", {})
    first = input_stamps(tmp_path, build, groups, {}, memo=memo)
    data = json.loads(memo.read_text())
    assert data["head"] == build.revision and sorted(data["counts"].values()) == [1, 2, 3]
    asked = _asked(monkeypatch)
    assert input_stamps(tmp_path, build, groups, {}, memo=memo) == first
    assert asked == []  # a no-op: git is asked nothing more
    # Believed while HEAD is the same; another HEAD asks again.
    data["counts"] = dict.fromkeys(data["counts"], 7)
    memo.write_text(json.dumps(data))
    assert input_stamps(tmp_path, build, groups, {}, memo=memo)["a"].version.startswith(
        "0.0.0.dev7+"
    )
    (tmp_path / "c" / "x.py").write_text("X = 'd'\n")
    git_commit(tmp_path, "d")
    moved = read_stamp(tmp_path, "git", {})
    later = input_stamps(tmp_path, moved, groups, {}, memo=memo)
    assert later["a"].version == first["a"].version
