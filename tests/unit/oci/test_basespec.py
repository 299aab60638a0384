"""Every documented `image.base` form, parsed once: `shipyard check` passes, the action key
follows the files, and with real files `shipyard build --output=image` builds on it.

The README documents `oci-layout:PATH`, `docker-archive:PATH`, `rootfs:PATH;PLATFORM`
(comma-separate several), `HOST[:PORT]/REPO[:TAG][@DIGEST]`, and a comma-separated
list of sources. The manifest validator, the key and the loader used to parse the text
three ways, and `shipyard check` refused the docker-archive and rootfs forms (issue 13).
The registry form is built on in tests/integration/test_base_media_types.py.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from shipyard.errors import UsageError
from shipyard.manifest._model import ImageDoc
from shipyard.oci.archive import write_docker_archive
from shipyard.oci.base import load_base
from shipyard.oci.basespec import BaseSource, BaseSpec, InvalidBase, parse_base
from shipyard.oci.keys import base_fingerprint
from shipyard.oci.layer import BlobStore, Entry, write_layer
from shipyard.oci.layout import read_layout, write_layout
from shipyard.oci.model import Config, Image, Platform, append_layer, make_index
from shipyard.oci.remote.reference import Reference
from tests.tiny import make_repo, shipyard

EPOCH = 1704067200
DIGEST = "sha256:" + "ab" * 32
BOTH = ["linux/amd64", "linux/arm64"]

# name -> (base, platforms); every form the README lists, on files make_files writes.
FORMS = {
    "layout": ("oci-layout:base", BOTH),
    "archive": ("docker-archive:base.tar", ["linux/amd64"]),
    "rootfs": ("rootfs:amd64.tar;linux/amd64,rootfs:arm64.tar;linux/arm64", BOTH),
    "mixed": ("rootfs:amd64.tar;linux/amd64, docker-archive:arm-archive.tar", BOTH),
    "absolute": ("oci-layout:ABS/base", ["linux/arm64"]),
}
REGISTRY = {
    "registry": f"127.0.0.1:5000/team/base:3.11@{DIGEST}",
    "registry-tag": "registry.example.com/base:3.11",
    "registry-digest": f"[::1]:5000/a/b@{DIGEST}",
    "registry-list": "127.0.0.1:5000/team/base:3.11,oci-layout:base",
}


def _image(store: BlobStore, platform: str) -> Image:
    layer = write_layer([Entry("etc/arch", data=platform.encode())], store, EPOCH)
    config = Config(env=("PATH=/usr/bin:/bin",))
    return append_layer(Image(Platform.parse(platform), config=config), layer)


def _rootfs(path: Path, text: bytes) -> Path:
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("etc/os-release")
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text))
    return path


def make_files(root: Path) -> None:
    """The base files FORMS names, under `root`."""
    store = BlobStore(root / ".store")
    write_layout(root / "base", make_index([_image(store, p) for p in BOTH]), ref="1")
    write_docker_archive(root / "base.tar", _image(store, "linux/amd64"), ["b:1"], EPOCH)
    write_docker_archive(root / "arm-archive.tar", _image(store, "linux/arm64"), ["b:2"], EPOCH)
    _rootfs(root / "amd64.tar", b"ID=amd64\n")
    _rootfs(root / "arm64.tar", b"ID=arm64\n")


def test_each_form_parses_into_one_typed_value() -> None:
    layout, archive = parse_base("oci-layout:a/b, docker-archive:/x/y.tar").sources
    assert layout == BaseSource("oci-layout", "a/b")
    assert archive == BaseSource("docker-archive", "/x/y.tar")
    amd, arm = parse_base("rootfs:a.tar;linux/amd64,rootfs:b.tar;linux/arm64/v8").sources
    assert (amd.path, amd.platform) == ("a.tar", Platform("linux", "amd64"))
    assert arm.platform == Platform("linux", "arm64", "v8")
    (ref,) = parse_base(REGISTRY["registry"]).sources
    assert ref.reference == Reference("127.0.0.1:5000", "team/base", "3.11", DIGEST)
    spec = parse_base(" oci-layout:a ,  127.0.0.1:5000/x ")
    assert str(spec) == "oci-layout:a,127.0.0.1:5000/x"
    assert BaseSpec.parse(str(spec)) == spec


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("rootfs:x.tar", "rootfs:PATH;PLATFORM"),
        ("rootfs:x.tar;amd64", "os/arch"),
        ("rootfs:;linux/amd64", "with the path"),
        ("oci-layout:", "with the path"),
        ("docker-archive: ", "with the path"),
        ("", "empty"),
        ("oci-layout:a,,oci-layout:b", "empty source"),
        ("python:3.11", "registry host"),
        ("ghcr.io/x@md5:0", "digest"),
        ("oci-layout:a\nb", "one line"),
    ],
)
def test_bad_forms_say_how_to_fix_them_everywhere(text: str, says: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidBase, match=says):
        parse_base(text)
    with pytest.raises(ValueError, match=says):  # the validator: a problem of image.base
        ImageDoc.model_validate({"base": text})
    with pytest.raises(UsageError, match=says):  # the loader: exit 2
        load_base(text, ["linux/amd64"], root=tmp_path, store=BlobStore(tmp_path / "s"))
    if text.strip():
        with pytest.raises(UsageError, match=says):  # the key
            base_fingerprint(text, tmp_path)


def test_the_key_follows_each_file_form_and_not_its_spelling(tmp_path: Path) -> None:
    make_files(tmp_path)
    keys = {name: base_fingerprint(text, tmp_path) for name, (text, _) in FORMS.items()}
    assert len(set(keys.values())) == len(keys)
    spaced = "rootfs:amd64.tar;linux/amd64 ,  docker-archive:arm-archive.tar"
    assert base_fingerprint(spaced, tmp_path) == keys["mixed"]
    assert base_fingerprint(parse_base(spaced), tmp_path) == keys["mixed"]
    _rootfs(tmp_path / "arm64.tar", b"ID=changed\n")
    assert base_fingerprint(FORMS["rootfs"][0], tmp_path) != keys["rootfs"]
    assert base_fingerprint(FORMS["mixed"][0], tmp_path) == keys["mixed"]
    write_docker_archive(
        tmp_path / "base.tar", _image(BlobStore(tmp_path / "s2"), "linux/arm64"), ["b:1"], EPOCH
    )
    assert base_fingerprint(FORMS["archive"][0], tmp_path) != keys["archive"]


def test_shipyard_check_passes_every_documented_form(tmp_path: Path) -> None:
    forms = {name: (text, BOTH) for name, text in REGISTRY.items()}
    forms |= {name: (text.replace("ABS", "/abs"), p) for name, (text, p) in FORMS.items()}
    root = make_repo(tmp_path / "repo", forms)  # no base files: check does not read them
    done = shipyard(root, "check", cache=tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    bad = make_repo(tmp_path / "bad", {"app": ("rootfs:x.tar", BOTH)})
    refused = shipyard(bad, "check", cache=tmp_path / "cache")
    assert refused.returncode == 2, refused.stderr
    assert "binaries.yaml:" in refused.stderr and "rootfs:PATH;PLATFORM" in refused.stderr


def test_every_file_form_builds_an_image_on_its_base(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    make_files(elsewhere)
    make_files(root)
    forms = {n: (t.replace("ABS", str(elsewhere)), p) for n, (t, p) in FORMS.items()}
    make_repo(root, forms)
    done = shipyard(root, "build", "--output=image", cache=tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    store = BlobStore(tmp_path / "s")
    for name, (text, platforms) in forms.items():
        wanted = [Platform.parse(p) for p in platforms]
        built = read_layout(root / "dist" / "images" / name, wanted)
        bases = load_base(text, platforms, root=root, store=store)
        for platform in wanted:
            image, _ = built[platform]
            base = bases[str(platform)].image
            # The app has no dependencies and no libraries: only its own layer is added.
            assert len(image.layers) == len(base.layers) + 1, name
            assert [x.diff_id for x in image.layers[: len(base.layers)]] == [
                x.diff_id for x in base.layers
            ], f"{name} {platform}: not built on its base"
