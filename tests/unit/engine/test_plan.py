"""The plan: selection by group, binary, output and platform; dedup; host skips."""

from __future__ import annotations

from pathlib import Path

import pytest

from shipyard.engine.plan import Selection, make_plan, shard, split_flag
from shipyard.errors import UsageError
from shipyard.manifest import Manifest, load_manifest

MANIFEST = """\
schema: 1
project: {name: demo, version: "1.0"}
defaults:
  outputs: [wheel, zipapp]
groups:
  front: [a, b]
  back: [c]
  everything: [front, back]
binaries:
  a: {source: shared, entrypoint: "a.main:main"}
  b: {source: shared, entrypoint: "b.main:main", outputs: [wheel]}
  c: {source: other, entrypoint: "c:main", host: [linux], outputs: [wheel, image]}
"""


@pytest.fixture
def manifest(tmp_path: Path) -> Manifest:
    for folder in ("shared", "other"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "pyproject.toml").write_text("[project]\nname='x'\n")
    (tmp_path / "binaries.yaml").write_text(MANIFEST)
    return load_manifest(tmp_path / "binaries.yaml", env={})


def test_one_wheel_per_source_even_when_binaries_share_it(manifest: Manifest) -> None:
    plan = make_plan(manifest, Selection(targets=("front",)), "linux")
    wheels = [a for a in plan.actions if a.kind == "wheel"]
    assert [w.id for w in wheels] == ["wheel:shared"]
    assert wheels[0].binaries == ("a", "b")
    assert [a.id for a in plan.actions] == ["wheel:shared", "zipapp:a"]
    assert plan.actions[1].deps == ("wheel:shared",)


def test_no_selection_means_all(manifest: Manifest) -> None:
    plan = make_plan(manifest, Selection(), "linux")
    assert [b.name for b in plan.binaries] == ["a", "b", "c"]
    assert {a.id for a in plan.actions} == {"wheel:shared", "wheel:other", "zipapp:a", "image:c"}


def test_groups_of_groups_resolve(manifest: Manifest) -> None:
    assert manifest.groups["everything"] == ("a", "b", "c")


def test_host_mismatch_is_a_typed_skip_not_an_error(manifest: Manifest) -> None:
    plan = make_plan(manifest, Selection(targets=("back",)), "darwin")
    assert plan.actions == ()
    assert [(s.binary, "builds only on linux" in s.reason) for s in plan.skips] == [("c", True)]


def test_output_and_platform_filters(manifest: Manifest) -> None:
    plan = make_plan(manifest, Selection(outputs=("zipapp",), platforms=("linux/arm64",)), "linux")
    assert [a.id for a in plan.actions] == ["wheel:shared", "zipapp:a"]
    assert plan.actions[1].platforms == ("linux/arm64",)


def test_wheel_only_binary_does_not_get_zipapp(manifest: Manifest) -> None:
    plan = make_plan(manifest, Selection(binaries=("b",)), "linux")
    assert [a.id for a in plan.actions] == ["wheel:shared"]


@pytest.mark.parametrize(
    ("selection", "message"),
    [
        (Selection(targets=("frnt",)), "--target=frnt: unknown value; did you mean 'front'?"),
        (Selection(binaries=("zz",)), "--binary=zz: unknown value"),
        (Selection(outputs=("wheels",)), "did you mean 'wheel'?"),
        (Selection(platforms=("linux/arm46",)), "did you mean 'linux/arm64'?"),
    ],
)
def test_bad_selection_names_the_flag(
    manifest: Manifest, selection: Selection, message: str
) -> None:
    with pytest.raises(UsageError) as caught:
        make_plan(manifest, selection, "linux")
    assert message in str(caught.value)
    assert caught.value.exit_code == 2


def test_split_flag_takes_repeats_and_commas() -> None:
    assert split_flag(["a,b", " c ", "a", ""]) == ("a", "b", "c")
    assert split_flag(None) == ()


def test_plan_json_is_relative(manifest: Manifest) -> None:
    data = make_plan(manifest, Selection(binaries=("a",)), "linux").to_json()
    assert data["actions"] == [
        {
            "id": "wheel:shared",
            "kind": "wheel",
            "binaries": ["a"],
            "source": "shared",
            "platforms": [],
            "deps": [],
        },
        {
            "id": "zipapp:a",
            "kind": "zipapp",
            "binaries": ["a"],
            "source": "shared",
            "platforms": ["linux/amd64", "linux/arm64"],
            "deps": ["wheel:shared"],
            "pythons": ["3.11"],
        },
    ]


def test_shards_cover_every_action_deterministically(manifest: Manifest) -> None:
    plan = make_plan(manifest, Selection(), "linux")
    slices = [shard(plan, i, 3) for i in (1, 2, 3)]
    covered = {a.id for s in slices for a in s.actions}
    assert covered == {a.id for a in plan.actions}
    assert [a.id for a in shard(plan, 2, 3).actions] == [a.id for a in slices[1].actions]
    for piece in slices:  # a shard carries the dependencies of what it builds
        ids = {a.id for a in piece.actions}
        assert all(set(a.deps) <= ids for a in piece.actions)
    with pytest.raises(UsageError, match="1 <= I <= N"):
        shard(plan, 0, 2)
