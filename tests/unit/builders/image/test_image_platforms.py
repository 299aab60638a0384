"""Issue 18, items 2 to 4, on disk: a build of some platforms keeps the others only when
they were built from the same inputs, `push` refuses an index lacking a declared
platform, the entry point is checked before any layer is written, and each platform's
`docker load` tarball has tags of its own."""

from __future__ import annotations

import dataclasses
import io
import json
import tarfile
from pathlib import Path

import pytest

from shipyard.builders.image import BUILD_NOTE, ImageBuilder
from shipyard.builders.image.archives import write_archive
from shipyard.engine.context import Outcome
from shipyard.engine.plan import Action
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import Artifact
from shipyard.errors import BuildError, ShipyardError, UsageError
from shipyard.oci.archive import archive_tags, platform_suffix
from shipyard.oci.layout import layout_tops
from shipyard.oci.remote.push import missing_platforms, read_layout_image, require_platforms
from shipyard.stamp import Stamp
from tests.unit.builders.image.test_image_builder import EPOCH, StandIn, _action, _ctx, _deps, repo
from tests.unit.builders.test_resolve import make_wheel

__all__ = ["repo"]  # the fixture, imported for its name

AMD, ARM = "linux/amd64", "linux/arm64"


def _build(root: Path, platforms: tuple[str, ...], version: str = "1.2.3") -> Outcome:
    action = dataclasses.replace(_action(root), platforms=platforms)
    ctx = dataclasses.replace(_ctx(root), stamp=Stamp(version, "abc123", False, EPOCH))
    return wrapped(ImageBuilder(StandIn())).run(action, ctx, _deps(root))


def _layout(root: Path) -> Path:
    return root / "dist" / "images" / "app"


def _index(root: Path) -> dict[str, object]:
    (top,) = layout_tops(_layout(root))
    blob = _layout(root) / "blobs" / "sha256" / top.digest.partition(":")[2]
    doc = json.loads(blob.read_bytes())
    assert isinstance(doc, dict)
    return doc


def _platforms(root: Path) -> list[str]:
    return list(read_layout_image(_layout(root)).platforms)


def _image(outcome: Outcome) -> Artifact:
    (image,) = [a for a in outcome.outputs if a.kind == "image"]
    return image


def test_a_subset_build_keeps_the_other_platforms_of_the_same_build(repo: Path) -> None:
    full = _build(repo, (AMD, ARM))
    before = _image(full).sha256
    subset = _build(repo, (ARM,))
    assert _platforms(repo) == ["linux/amd64", "linux/arm64/v8"]
    # The very index a build of every platform makes, blobs and all.
    assert _image(subset).sha256 == before
    read_layout_image(_layout(repo))  # every blob of both platforms is there
    metadata = _image(subset).metadata.image
    assert metadata is not None and len(metadata.platforms) == 2
    assert not [a for a in subset.outputs if a.kind == "image-archive"], "tarballs on request"
    # The kept platform's tarball is written from the layout like the built one's.
    for platform in (AMD, ARM):
        tarball, _ = write_archive(repo / "dist", "app", platform)
        with tarfile.open(tarball) as tar:
            assert "manifest.json" in tar.getnames()
    assert subset.inputs != full.inputs, "what is kept is part of the key"


def test_a_subset_build_of_other_inputs_keeps_nothing(repo: Path) -> None:
    _build(repo, (AMD, ARM), version="1.2.2")
    _build(repo, (ARM,), version="1.2.3")
    assert _platforms(repo) == ["linux/arm64/v8"], "a stale amd64 image must not be kept"
    image = read_layout_image(_layout(repo))
    assert missing_platforms(image, [AMD, ARM]) == [AMD]


def test_an_index_without_the_build_note_keeps_nothing(repo: Path) -> None:
    _build(repo, (AMD, ARM))
    # The note is the layout's own (its index.json entry), never in the index pushed.
    notes = _index(repo).get("annotations")
    assert isinstance(notes, dict) and BUILD_NOTE not in notes
    entry = json.loads((_layout(repo) / "index.json").read_text())["manifests"][0]
    assert BUILD_NOTE in entry["annotations"]
    # A layout some other tool (or an older shipyard) wrote: the entry without the note.
    del entry["annotations"][BUILD_NOTE]
    (_layout(repo) / "index.json").write_text(
        json.dumps({"schemaVersion": 2, "manifests": [entry]})
    )
    _build(repo, (ARM,))
    assert _platforms(repo) == ["linux/arm64/v8"]


def test_the_pushed_index_does_not_depend_on_what_the_build_was_keyed_by(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same content, another action key (a base layout written by another command, a
    newer shipyard): the same index digest, only the local note differs."""
    first = _image(_build(repo, (AMD, ARM)))
    before = (_layout(repo) / "index.json").read_bytes()
    import shipyard.builders.image as image_builder

    monkeypatch.setattr(image_builder, "build_identity", lambda inputs: "0" * 64)
    again = _image(_build(repo, (AMD, ARM)))
    assert again.metadata.image is not None and first.metadata.image is not None
    assert again.metadata.image.digest == first.metadata.image.digest
    assert (_layout(repo) / "index.json").read_bytes() != before


def test_a_subset_build_with_nothing_in_dist_writes_the_subset(repo: Path) -> None:
    _build(repo, (ARM,))
    assert _platforms(repo) == ["linux/arm64/v8"]


def test_push_refuses_an_index_lacking_a_declared_platform(repo: Path) -> None:
    _build(repo, (ARM,))
    image = read_layout_image(_layout(repo))
    with pytest.raises(UsageError) as caught:
        require_platforms("app", _layout(repo), image, [AMD, ARM])
    text = str(caught.value)
    assert caught.value.exit_code == 2
    assert "app:" in text and "linux/amd64" in text and "--allow-partial" in text
    assert "shipyard build --binary=app --output=image" in text
    require_platforms("app", _layout(repo), image, [ARM])  # all declared are there
    # A declared variant-less platform is served by a manifest with a variant.
    assert missing_platforms(image, ["linux/arm64"]) == []


def test_an_entry_point_missing_from_the_wheel_fails_before_any_layer(repo: Path) -> None:
    wheel = make_wheel(repo / "wheels", "app", "1.2.3", files={"app/__init__.py": ""})
    deps = (Artifact("wheel", "", "py3-none-any", wheel, "0" * 64, wheel.stat().st_size),)
    action = dataclasses.replace(_action(repo), entrypoint="notes.cli:main")
    with pytest.raises(BuildError) as caught:
        wrapped(ImageBuilder(StandIn())).run(action, _ctx(repo), deps)
    cause = caught.value.__cause__
    assert isinstance(cause, ShipyardError) and cause.exit_code == 2  # bad input
    assert "entrypoint notes.cli:main: no module notes in app's wheel" in str(caught.value)
    store = repo / "cache"
    layers = [p for p in store.rglob("*") if p.is_file() and len(p.name) == 64]
    assert not layers, f"layers written before the check: {layers}"
    assert not _layout(repo).exists()
    # The same wheel with the module builds.
    good = make_wheel(repo / "good", "app", "1.2.3", files={"notes/cli.py": "def main(): 0\n"})
    ok = (Artifact("wheel", "", "py3-none-any", good, "1" * 64, good.stat().st_size),)
    wrapped(ImageBuilder(StandIn())).run(action, _ctx(repo), ok)


def test_an_image_action_without_an_entry_point_is_refused(repo: Path) -> None:
    action: Action = dataclasses.replace(_action(repo), entrypoint="")
    with pytest.raises(BuildError, match="no entrypoint"):
        wrapped(ImageBuilder(StandIn())).run(action, _ctx(repo), _deps(repo))


def test_each_platform_tarball_has_tags_of_its_own(repo: Path) -> None:
    _build(repo, (AMD, ARM))
    seen: dict[str, list[str]] = {}
    for flat in ("linux_amd64", "linux_arm64"):
        tarball, _ = write_archive(repo / "dist", "app", flat.replace("_", "/"))
        assert tarball.name == f"app-1.2.3-{flat}.tar"
        with tarfile.open(tarball) as tar:
            handle = tar.extractfile("manifest.json")
            assert handle is not None
            seen[flat] = json.load(io.BytesIO(handle.read()))[0]["RepoTags"]
    assert seen == {
        "linux_amd64": ["app:1.2.3-amd64", "app:1.2.3-linux_amd64"],
        "linux_arm64": ["app:1.2.3-arm64", "app:1.2.3-linux_arm64"],
    }
    assert not set(seen["linux_amd64"]) & set(seen["linux_arm64"])


@pytest.mark.parametrize(
    ("platform", "suffix"),
    [(AMD, "amd64"), (ARM, "arm64"), ("linux/arm/v7", "arm-v7"), ("linux/386", "386")],
)
def test_platform_suffixes(platform: str, suffix: str) -> None:
    assert platform_suffix(platform) == suffix
    assert archive_tags("greetapi", "1.2.3", platform)[0] == f"greetapi:1.2.3-{suffix}"
