"""release/staged.py: release.json read and written as typed values, by one module."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from shipyard.release.attachments import staged_attachments
from shipyard.release.staged import (
    CHECKSUMS,
    RELEASE_JSON,
    SIGNATURE,
    StagedError,
    StagedFile,
    StagedImage,
    covering,
    inside,
    loads,
    parse_release,
    staged_path,
)

SRC = Path(__file__).resolve().parents[3] / "src" / "shipyard"
D = "sha256:" + "d" * 64
P1, P2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
S = "sha256:" + "5" * 64


def release_json() -> dict[str, object]:
    """A release.json of every kind staging writes: wheel, zipapp, archive, an image and a
    variant with their SBOM attachments, the three shapes of SBOM file."""
    sbom_platform = {
        "platform": "linux/amd64",
        "of": P1,
        "tag": "sha256-" + "1" * 64 + ".sbom",
        "digest": S,
        "documents": ["sbom/app-1.0-image-linux_amd64.cdx.json"],
        "references": ["127.0.0.1:5000/m/app:sha256-" + "1" * 64 + ".sbom"],
    }
    image: dict[str, object] = {
        "kind": "image",
        "binary": "app",
        "path": "images/app",
        "digest": D,
        "media_type": "application/vnd.oci.image.index.v1+json",
        "size": 512,
        "platform": ["linux/amd64", "linux/arm64"],
        "manifests": [
            {"platform": "linux/amd64", "digest": P1, "size": 700},
            {"platform": "linux/arm64", "digest": P2, "size": 701},
        ],
        "hubs": ["127.0.0.1:5000/m"],
        "tags": ["1.0", "latest"],
        "sbom": {
            "tag": "sha256-" + "d" * 64 + ".sbom",
            "digest": S,
            "documents": ["sbom/app-1.0-image-linux_amd64.cdx.json"],
            "references": ["127.0.0.1:5000/m/app:sha256-" + "d" * 64 + ".sbom"],
            "platforms": [sbom_platform],
        },
    }
    variant = {
        **{k: v for k, v in image.items() if k != "sbom"},
        "path": "images/app/variants/debug",
        "tags": ["1.0-debug", "latest-debug"],
        "variant": "debug",
        "collapsed": True,
    }
    files = [
        {"kind": "wheel", "platform": "any", "path": "wheels/app-1.0-py3-none-any.whl"},
        {"kind": "zipapp", "binary": "app", "platform": "any", "path": "zipapps/app-1.0.pyz"},
        {"kind": "archive", "binary": "app", "platform": "linux/amd64", "path": "archives/a.tgz"},
    ]
    sboms = [
        {"kind": "sbom", "binary": "app", "platform": "any", "of": "zipapps/app-1.0.pyz"},
        {
            "kind": "sbom",
            "binary": "app",
            "platform": "linux/amd64",
            "of": P1,
            "image": D,
            "variant": "debug",
        },
        {"kind": "sbom", "binary": "lib", "platform": "any"},
    ]
    listed = [
        {**f, "path": f.get("path", f"sbom/{n}.cdx.json"), "sha256": "ab" * 32, "size": 10 + n}
        for n, f in enumerate([*files, *sboms])
    ]
    return {
        "schema": 1,
        "project": "mesh",
        "version": "1.0",
        "tag": "v1.0",
        "revision": "c" * 40,
        "snapshot": False,
        "build": {"version": "1.0", "revision": "c" * 40, "dirty": False, "created": "x"},
        "artifacts": [*listed[:3], image, variant, *listed[3:]],
    }


def test_release_json_round_trips_byte_for_byte() -> None:
    """What staging wrote reads back as typed values that write the very same bytes."""
    data = (json.dumps(release_json(), indent=2) + "\n").encode()
    staged = loads(data)
    assert staged.dumps() == data
    assert [a.kind for a in staged.artifacts] == [
        "wheel", "zipapp", "archive", "image", "image", "sbom", "sbom", "sbom"
    ]  # fmt: skip
    default, debug = staged.images
    assert (default.variant, debug.variant, debug.collapsed) == ("", "debug", True)
    assert [s.platform for s in default.sboms] == ["", "linux/amd64"]
    assert debug.sboms == () and default.manifests[1].digest == P2
    assert [w.name for w in staged.wheels] == ["app-1.0-py3-none-any.whl"]
    (image_sbom,) = [f for f in staged.files("sbom") if f.image]
    assert (image_sbom.of, image_sbom.variant) == (P1, "debug")


def test_tags_move_version_first_across_images() -> None:
    staged = parse_release(release_json())
    assert [(i.variant, t) for i, t in staged.tag_order()] == [
        ("", "1.0"), ("debug", "1.0-debug"), ("", "latest"), ("debug", "latest-debug")
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda d: d["artifacts"][0].update(size="10"), r"artifacts\[0\] has size '10'"),
        (lambda d: d["artifacts"][3].update(tags=[]), r"artifacts\[3\] .*has no tags"),
        (lambda d: d["artifacts"][3].update(hubs="h"), r"artifacts\[3\] has hubs 'h'"),
        (lambda d: d["artifacts"][0].update(kind="rpm"), r"has the kind 'rpm'"),
        (lambda d: d.update(snapshot="no"), r"has snapshot 'no', not true or false"),
        (lambda d: d.update(artifacts={}), r"has no list of artifacts"),
        (
            lambda d: d["artifacts"][3]["manifests"].append(7),
            r"artifacts\[3\] manifests\[2\] is not an object",
        ),
    ],
)
def test_a_field_of_the_wrong_shape_is_named_with_exit_2(change: object, named: str) -> None:
    data = release_json()
    assert callable(change)
    change(data)
    with pytest.raises(StagedError, match=named) as caught:
        parse_release(data, "dist/release/1.0/release.json")
    assert caught.value.exit_code == 2
    assert str(caught.value).startswith("dist/release/1.0/release.json")


def test_covering_files_join_the_list_but_never_release_json(tmp_path: Path) -> None:
    """The sums and their signature are artifacts of the same list once written; they
    cover release.json, so it never lists them."""
    staged = parse_release(release_json())
    (tmp_path / "SHA256SUMS").write_text("sums\n")
    (tmp_path / "SHA256SUMS.sig").write_text("sig\n")
    whole = staged.with_files(*covering(tmp_path))
    assert [a.kind for a in whole.artifacts[-2:]] == [CHECKSUMS, SIGNATURE]
    assert whole.files(CHECKSUMS)[0].size == 5
    assert whole.dumps() == staged.dumps()
    read = StagedFile.read(tmp_path, "SHA256SUMS", CHECKSUMS)
    assert read.sha256 == hashlib.sha256(b"sums\n").hexdigest() == whole.files(CHECKSUMS)[0].sha256


def test_staged_paths() -> None:
    assert staged_path("wheel", "a.whl") == "wheels/a.whl"
    assert staged_path("image", "app") == "images/app"
    assert staged_path("sbom", "app") == "sbom/app.cdx.json"


def test_only_staged_py_names_the_staged_folders_files() -> None:
    """release.json, the sums, their signature, the provenance and the journal are named
    in one module; every other one imports the names."""
    names = re.compile(
        r"[\"'](release\.json|SHA256SUMS(\.sig)?|publish\.journal|provenance\.intoto\.jsonl)[\"']"
    )
    found = [
        f"{path.relative_to(SRC)}:{number}"
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "staged.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if names.search(line)
    ]
    assert found == []


def test_no_release_module_passes_release_json_as_a_dict() -> None:
    """No function of release/ takes or returns release.json as `dict[str, Any]`/`Mapping`:
    the typed StagedRelease is what crosses module boundaries."""
    pattern = re.compile(r"staged: (dict|Mapping)\[|-> (dict|Mapping)\[str, Any\]:.*staged")
    found = [
        f"{path.name}:{number}"
        for path in sorted((SRC / "release").glob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []
    assert StagedImage.__dataclass_fields__["kind"].default == "image"
    assert RELEASE_JSON == "release.json"


@pytest.mark.parametrize("rel", ["../secret", "/etc/passwd", "sbom/../../x", "", "a//b"])
def test_a_path_release_json_names_outside_its_folder_is_refused(tmp_path: Path, rel: str) -> None:
    with pytest.raises(StagedError, match="outside") as caught:
        inside(tmp_path / "release", rel)
    assert caught.value.exit_code == 2


def test_sbom_documents_outside_the_folder_are_never_read(tmp_path: Path) -> None:
    """An SBOM attachment's documents come from release.json, which a folder's writer
    controls when it is unsigned: a document outside the folder is refused unread."""
    secret = tmp_path / "secret"
    secret.write_text("not for a registry\n")
    data = release_json()
    image = data["artifacts"][3]  # type: ignore[index]
    image["sbom"]["documents"] = ["../secret"]
    staged = parse_release(data)
    folder = tmp_path / "release"
    folder.mkdir()
    with pytest.raises(StagedError, match=r"names the path '\.\./secret', outside"):
        staged_attachments(folder, staged, StagedError)
