"""The issue-15 manifest keys: extras, size budgets, image platforms, variants,
protected hubs and movable tags; merged with defaults and kept by the manifest cache."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shipyard.manifest import SizeBudget, Variant, load_manifest, parse_size
from shipyard.manifest._cached import manifest_from_json, manifest_to_json

MANIFEST = """\
schema: 1
project: {name: demo}
defaults:
  outputs: [wheel, zipapp, image]
  image:
    hubs: [127.0.0.1:5000/staging, 127.0.0.1:5001/final]
    protected: [127.0.0.1:5001/final]
    variants:
      debug: {base: "oci-layout:bases/debug", env: {DEBUG: "1"}}
  size:
    zipapp: {max: 40MB}
binaries:
  agent:
    source: app
    entrypoint: app.main:main
    extras: [fast]
    platforms: [linux/amd64, linux/arm64]
    image:
      platforms: [linux/arm64]
      movable_tags: [latest, stable]
      variants:
        distroless: {base: "oci-layout:bases/distroless"}
    size:
      zipapp: {min: 1KiB}
      image: {max: 1.5GiB}
  cli:
    source: app
    entrypoint: app.main:main
"""


@pytest.fixture
def manifest_path(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "pyproject.toml").write_text(
        '[project]\nname = "app"\nversion = "1"\n'
        '[project.optional-dependencies]\nfast = ["orjson"]\n'
    )
    path = tmp_path / "binaries.yaml"
    path.write_text(MANIFEST)
    return path


def test_the_new_keys_merge_with_defaults(manifest_path: Path) -> None:
    m = load_manifest(manifest_path, {})
    agent, cli = m.binaries["agent"], m.binaries["cli"]
    assert agent.extras == ("fast",) and cli.extras == ()
    assert agent.image.platforms == ("linux/arm64",)
    assert cli.image.platforms == ("linux/amd64", "linux/arm64")  # the binary's
    assert agent.image.protected == ("127.0.0.1:5001/final",)
    assert agent.image.movable_tags == ("latest", "stable")
    assert cli.image.movable_tags == ("latest",)
    # Variants merge by name: the default's debug and the binary's distroless.
    assert dict(agent.image.variants) == {
        "debug": Variant("oci-layout:bases/debug", {"DEBUG": "1"}),
        "distroless": Variant("oci-layout:bases/distroless", {}),
    }
    assert dict(cli.image.variants) == {"debug": Variant("oci-layout:bases/debug", {"DEBUG": "1"})}
    # Budgets merge per kind and bound: the default max with the binary's min.
    assert dict(agent.size) == {
        "zipapp": SizeBudget(min=1024, max=40_000_000),
        "image": SizeBudget(max=int(1.5 * 1024**3)),
    }
    assert dict(cli.size) == {"zipapp": SizeBudget(max=40_000_000)}


def test_the_manifest_cache_keeps_them(manifest_path: Path) -> None:
    m = load_manifest(manifest_path, {})
    again = manifest_from_json(manifest_to_json(m))
    for name in m.binaries:
        assert again.binaries[name] == m.binaries[name]


def test_the_image_action_takes_the_image_platforms(manifest_path: Path) -> None:
    from shipyard.engine.plan import Selection, make_plan

    plan = make_plan(load_manifest(manifest_path, {}), Selection(binaries=("agent",)))
    found = {a.id: a.platforms for a in plan.actions if a.kind != "wheel"}
    assert found == {
        "zipapp:agent": ("linux/amd64", "linux/arm64"),
        "image:agent": ("linux/arm64",),
    }
    assert {a.extras for a in plan.actions if a.kind != "wheel"} == {("fast",)}
    # --platform=linux/amd64 leaves the image nothing: only the zipapp is planned.
    narrowed = make_plan(
        load_manifest(manifest_path, {}),
        Selection(binaries=("agent",), platforms=("linux/amd64",)),
    )
    assert [a.id for a in narrowed.actions if a.kind != "wheel"] == ["zipapp:agent"]


@pytest.mark.parametrize(
    ("text", "size"),
    [("40MB", 40_000_000), ("512KiB", 524_288), ("1.5GiB", 1_610_612_736), ("7 B", 7),
     ("2kb", 2000)],
)  # fmt: skip
def test_sizes_parse_in_decimal_and_binary_units(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["40", "MB", "-1MB", "40 megabytes", "1e3MB", ""])
def test_a_size_without_a_known_unit_is_refused_with_the_fix(text: str) -> None:
    with pytest.raises(ValueError, match="write a size such as 40MB"):
        parse_size(text)
