"""Image variants (issue 15 item 3): which variants collapse into the default, the action
key of an image with variants, and what the daemonless builder writes for them."""

from __future__ import annotations

import dataclasses
import json
import shutil
import tarfile
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from shipyard.artifacts import Artifact, select
from shipyard.builders.image import ImageBuilder
from shipyard.builders.image.archives import write_archive
from shipyard.builders.image.dockerfile import DockerfileBuilder
from shipyard.builders.image.variants import (
    DEFAULT,
    plan_variants,
    variant_layout,
    variant_of,
)
from shipyard.builders.kinds import ImageKinds
from shipyard.builders.resolve import Resolution
from shipyard.engine.keys import canonical
from shipyard.engine.plan import Action
from shipyard.engine.run import wrapped
from shipyard.errors import BuildError, ShipyardError
from shipyard.manifest import Image as ImageSettings
from shipyard.manifest import Variant
from shipyard.oci.layer import BlobStore, Entry, write_layer
from shipyard.oci.layout import layout_tops, write_layout
from shipyard.oci.model import Config, Image, Platform, append_layer, make_index
from shipyard.oci.remote.push import variant_tags
from shipyard.oci.remote.reference import InvalidReference
from tests.unit.builders.image.test_image_builder import EPOCH, StandIn, _action, _ctx, _deps, repo

__all__ = ["repo"]  # the fixture, imported for its name


def _settings(base: str | None = "oci-layout:base", **variants: Variant) -> ImageSettings:
    return ImageSettings(
        base=base,
        env=MappingProxyType({"LOG_LEVEL": "info"}),
        variants=MappingProxyType(variants),
    )


# --- which variants collapse ------------------------------------------------------------


def test_a_variant_with_the_default_base_and_env_collapses_into_the_default() -> None:
    plan = plan_variants(
        _settings(
            same=Variant(),  # no base, no env: the default image itself
            spelt=Variant(base="oci-layout:base", env={"LOG_LEVEL": "info"}),  # the same, written
            debug=Variant(env={"LOG_LEVEL": "debug"}),
        )
    )
    assert plan.variants == ("debug", "same", "spelt")
    assert plan.collapsed("same") and plan.collapsed("spelt")
    assert not plan.collapsed("debug")
    assert len(plan.flavours) == 2
    assert plan.flavour("debug").base == "oci-layout:base"  # the image's own base
    assert plan.flavour("debug").env_map == {"LOG_LEVEL": "debug"}


def test_env_merges_over_the_image_env_and_another_base_never_collapses() -> None:
    plan = plan_variants(
        _settings(
            distroless=Variant(base="oci-layout:distroless"),
            debug=Variant(base="oci-layout:debug", env={"DEBUG": "1"}),
        )
    )
    assert not plan.collapsed("distroless") and not plan.collapsed("debug")
    assert plan.flavour("distroless").env_map == {"LOG_LEVEL": "info"}
    assert plan.flavour("debug").env_map == {"LOG_LEVEL": "info", "DEBUG": "1"}
    assert plan.flavour(DEFAULT).base == "oci-layout:base"


def test_variants_equal_to_each_other_are_built_once() -> None:
    plan = plan_variants(
        _settings(
            a=Variant(base="oci-layout:slim", env={"X": "1"}),
            b=Variant(base="oci-layout:slim", env={"X": "1"}),
            c=Variant(base="oci-layout:slim", env={"X": "2"}),
        )
    )
    assert len(plan.flavours) == 3  # default, a (= b), c
    assert plan.flavour("a") is plan.flavour("b")
    assert plan.flavour("c") is not plan.flavour("a")


def test_no_base_is_an_error() -> None:
    with pytest.raises(ShipyardError, match=r"set image\.base"):
        plan_variants(_settings(base=None, debug=Variant(base="oci-layout:debug")))


def test_variant_tags_are_suffixed_and_checked() -> None:
    assert variant_tags(["1.4.0", "latest"], "debug") == ("1.4.0-debug", "latest-debug")
    assert variant_tags(["1.4.0"], "") == ("1.4.0",)
    with pytest.raises(InvalidReference):
        variant_tags(["x" * 120], "distroless")  # 131 characters: not a tag


def test_variant_layouts_sit_inside_the_default_folder_and_read_back(tmp_path: Path) -> None:
    layout = tmp_path / "dist" / "images" / "agent"
    assert variant_layout(layout, "") == layout
    folder = variant_layout(layout, "debug")
    assert folder == layout / "variants" / "debug"
    assert variant_of(Artifact("image", "agent", "any", folder / "index.json", "0", 1)) == "debug"
    assert variant_of(Artifact("image", "agent", "any", layout / "index.json", "0", 1)) == ""
    # A binary called "variants" is still the default image.
    other = tmp_path / "dist" / "images" / "variants" / "index.json"
    assert variant_of(Artifact("image", "variants", "any", other, "0", 1)) == ""


# --- the action key ---------------------------------------------------------------------


def _key_inputs(root: Path, settings: ImageSettings) -> Mapping[str, Any]:
    action = dataclasses.replace(_action(root), image=settings)
    return ImageKinds().inputs(action, _ctx(root), _deps(root))


def test_the_key_of_an_image_with_variants_is_json_and_follows_them(repo: Path) -> None:
    plain = _key_inputs(repo, _settings())
    debug = _key_inputs(repo, _settings(debug=Variant(base="oci-layout:base", env={"D": "1"})))
    canonical(debug)  # Variant dataclasses used to make this raise TypeError
    assert debug["settings"]["variants"] == {
        "debug": {"base": "oci-layout:base", "env": {"D": "1"}}
    }
    other_env = _key_inputs(repo, _settings(debug=Variant(base="oci-layout:base", env={"D": "2"})))
    assert len({canonical(plain), canonical(debug), canonical(other_env)}) == 3
    # Where and who pushes is not what is built.
    pushed = dataclasses.replace(
        _settings(debug=Variant(base="oci-layout:base", env={"D": "1"})),
        hubs=("127.0.0.1:5000/x",),
        tags=("other",),
        protected=("127.0.0.1:5000/x",),
        movable_tags=("latest", "stable"),
    )
    assert canonical(_key_inputs(repo, pushed)) == canonical(debug)


def test_the_key_follows_what_a_variant_base_holds(repo: Path) -> None:
    _layout_base(repo / "debug-base", b"ID=debug\n")
    settings = _settings(debug=Variant(base="oci-layout:debug-base"))
    first = _key_inputs(repo, settings)
    assert list(first["variant_bases"]) == ["oci-layout:debug-base"]
    _layout_base(repo / "debug-base", b"ID=debug2\n")
    assert canonical(_key_inputs(repo, settings)) != canonical(first)


# --- what the builder writes ------------------------------------------------------------


class Resolver(StandIn):
    """The image tests' stand-in resolver, taking the binary's extras too."""

    def __call__(  # type: ignore[override]
        self, *args: Any, extras: tuple[str, ...] = (), **kwargs: Any
    ) -> Resolution:
        return super().__call__(*args, **kwargs)


def _layout_base(folder: Path, marker: bytes, *, busybox: bool = False) -> None:
    """A two-platform base whose one layer holds /etc/os-release = `marker`."""
    store = BlobStore(folder.parent / f"{folder.name}-store")
    images = []
    for platform in ("linux/amd64", "linux/arm64/v8"):
        entries = [Entry("etc/os-release", data=marker)]
        if busybox:
            entries.append(Entry("bin/busybox", data=b"\x7fELF", executable=True))
        layer = write_layer(entries, store, EPOCH)
        config = Config(env=("PATH=/usr/bin:/bin",), cmd=("python3",))
        images.append(append_layer(Image(Platform.parse(platform), config=config), layer))
    write_layout(folder, make_index(images), ref="3.11")


def _build(root: Path, settings: ImageSettings, **changes: Any) -> tuple[Artifact, ...]:
    action = dataclasses.replace(_action(root), image=settings, **changes)
    outcome = wrapped(ImageBuilder(Resolver())).run(action, _ctx(root), _deps(root))
    return outcome.outputs


def _doc(layout: Path, digest: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (layout / "blobs" / "sha256" / digest.partition(":")[2]).read_bytes()
    )
    return data


def _images(layout: Path) -> dict[str, dict[str, Any]]:
    """platform -> {manifest, config} of the layout's index."""
    (top,) = layout_tops(layout)
    found = {}
    for entry in _doc(layout, top.digest)["manifests"]:
        manifest = _doc(layout, entry["digest"])
        platform = f"{entry['platform']['os']}/{entry['platform']['architecture']}"
        found[platform] = {
            "manifest": manifest,
            "config": _doc(layout, manifest["config"]["digest"]),
        }
    return found


def _variants(repo: Path) -> ImageSettings:
    _layout_base(repo / "debug-base", b"ID=debug\n", busybox=True)
    _layout_base(repo / "distroless-base", b"ID=distroless\n")
    return dataclasses.replace(
        _settings(
            debug=Variant(base="oci-layout:debug-base", env={"DEBUG": "1"}),
            distroless=Variant(base="oci-layout:distroless-base"),
            same=Variant(),
        ),
        user="65532",
    )


def test_variants_share_the_app_layers_and_differ_only_in_base_and_config(repo: Path) -> None:
    outputs = _build(repo, _variants(repo))
    images = select(outputs, kind="image")
    assert [variant_of(a) for a in images] == ["", "debug", "distroless", "same"]
    digests = {variant_of(a): a.metadata.image.digest for a in images if a.metadata.image}
    assert digests["same"] == digests[""], "a variant equal to the default is the default"
    assert len({digests[""], digests["debug"], digests["distroless"]}) == 3
    layout = repo / "dist" / "images" / "app"
    default, debug, distroless = (
        _images(variant_layout(layout, name)) for name in ("", "debug", "distroless")
    )
    for platform, built in default.items():
        own = [d["digest"] for d in built["manifest"]["layers"]]
        for variant in (debug[platform], distroless[platform]):
            theirs = [d["digest"] for d in variant["manifest"]["layers"]]
            # Base layer differs; the dependency and app layers are the very same blobs.
            assert theirs[0] != own[0] and theirs[1:] == own[1:]
            assert variant["config"]["config"]["User"] == "65532"
        assert "DEBUG=1" in debug[platform]["config"]["config"]["Env"]
        assert "LOG_LEVEL=info" in debug[platform]["config"]["config"]["Env"]
        assert "DEBUG=1" not in distroless[platform]["config"]["config"]["Env"]
        assert "DEBUG=1" not in built["config"]["config"]["Env"]
    # Every file of the folder is an artifact exactly once (a variant's are its own).
    listed = [a.path for a in outputs if a.kind in ("image", "image-layout")]
    assert len(listed) == len(set(listed))
    assert set(listed) == {p for p in layout.rglob("*") if p.is_file()}
    # Tarballs on request, named and tagged with the variant's suffixed version.
    assert not select(outputs, kind="image-archive")
    archives = {
        write_archive(repo / "dist", "app", f"linux/{arch}", variant=v)[0].name
        for v in ("", "debug", "distroless")
        for arch in ("amd64", "arm64")
    }
    assert archives == {
        f"app-1.2.3{v}-linux_{arch}.tar"
        for v in ("", "-debug", "-distroless")
        for arch in ("amd64", "arm64")
    }
    with tarfile.open(repo / "dist" / "images" / "app-1.2.3-debug-linux_arm64.tar") as tar:
        handle = tar.extractfile("manifest.json")
        assert handle is not None
        assert json.load(handle)[0]["RepoTags"][0] == "app:1.2.3-debug-arm64"
    top = json.loads((variant_layout(layout, "distroless") / "index.json").read_text())
    assert top["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] == (
        "1.2.3-distroless"
    )


def test_variants_build_twice_to_the_same_bytes(repo: Path) -> None:
    settings = _variants(repo)
    first = {str(a.path): a.sha256 for a in _build(repo, settings)}
    again = {str(a.path): a.sha256 for a in _build(repo, dataclasses.replace(settings))}
    changed = sorted(p for p in first if again.get(p) != first[p])
    assert not changed, f"differs on the second build: {changed[:3]}"


def test_a_subset_build_keeps_the_variants_other_platforms(repo: Path) -> None:
    settings = _variants(repo)
    full = {variant_of(a): a.metadata.image for a in select(_build(repo, settings), kind="image")}
    subset = _build(repo, settings, platforms=("linux/arm64",))
    kept = {variant_of(a): a.metadata.image for a in select(subset, kind="image")}
    assert kept == full, "the merged indexes are the full build's, variants too"


def test_a_removed_variant_leaves_nothing_behind(repo: Path) -> None:
    _build(repo, _variants(repo))
    layout = repo / "dist" / "images" / "app"
    assert (layout / "variants" / "debug" / "index.json").is_file()
    _build(repo, _settings())
    assert not (layout / "variants").exists()


def test_dockerfile_images_refuse_variants_naming_the_binary(repo: Path) -> None:
    settings = dataclasses.replace(
        _settings(debug=Variant(base="oci-layout:base")), dockerfile="Dockerfile"
    )
    action: Action = dataclasses.replace(_action(repo), image=settings)
    with pytest.raises(BuildError, match=r"image app: image\.variants \(debug\)"):
        DockerfileBuilder().build(action, _ctx(repo), _deps(repo), None)  # type: ignore[arg-type]


# --- shipyard push ----------------------------------------------------------------------

PUSH_MANIFEST = """\
schema: 1
project: {name: app, version: "1.2.3"}
binaries:
  app:
    source: src
    entrypoint: "app.main:main"
    outputs: [image]
    platforms: [linux/amd64, linux/arm64]
    image:
      base: "oci-layout:base"
      hubs: ["127.0.0.1:9/x"]
      variants:
        debug: {base: "oci-layout:debug-base", env: {DEBUG: "1"}}
        distroless: {base: "oci-layout:distroless-base"}
"""


def test_push_refuses_before_any_push_when_a_variant_was_not_built(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from shipyard.cli import main

    _build(repo, _variants(repo))
    (repo / "src" / "pyproject.toml").write_text("[project]\nname = 'app'\nversion = '1.2.3'\n")
    (repo / "binaries.yaml").write_text(PUSH_MANIFEST)
    missing = repo / "dist" / "images" / "app" / "variants" / "distroless"
    shutil.rmtree(missing)
    # Port 9 (discard) on loopback: nothing listens, so any attempt to push would fail
    # with a connection error rather than this usage error.
    assert main(["push", "-f", str(repo / "binaries.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"app: no distroless variant image in {missing}" in err
    assert "shipyard build --binary=app --output=image" in err
