"""The base layer check notes each checked layer's library events beside its blob.

The image builder's native check needs a base's shared objects (`library_event`);
the check reads every entry anyway, so it keeps them per layer, keyed by the blob's
digest and the note's format (`recorded_libraries`). A note that is not exactly
what the check writes is a miss, never trusted.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from shipyard.oci.layer import BlobStore, layer_from_tarball
from shipyard.oci.layercheck import (
    UnsafeLayerError,
    check_base_layers,
    library_event,
    recorded_libraries,
)
from shipyard.oci.model import Layer, OCIError


def _layer(store: BlobStore, names: list[str]) -> Layer:
    """A gzip tar layer of empty files (names ending in '/' are folders)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name in names:
            info = tarfile.TarInfo(name.rstrip("/"))
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
            tar.addfile(info)
    return layer_from_tarball(io.BytesIO(raw.getvalue()), store)


def _note(layer: Layer, store: BlobStore) -> Path:
    return store.path(layer.descriptor.digest).with_suffix(".libs")


def test_library_events_are_library_folder_objects_and_whiteouts() -> None:
    assert library_event("usr/lib/x86_64-linux-gnu/libc.so.6", isdir=False) == (
        "library",
        "usr/lib/x86_64-linux-gnu/libc.so.6",
    )
    assert library_event("lib64/libz.so", isdir=False) == ("library", "lib64/libz.so")
    assert library_event("usr/lib/libc.so.6", isdir=True) is None  # a folder
    assert library_event("usr/share/doc/libfake.so.9", isdir=False) is None
    assert library_event("usr/lib/libc.a", isdir=False) is None
    assert library_event("usr/lib/.wh.libgone.so.1", isdir=False) == (
        "whiteout",
        "usr/lib/libgone.so.1",
    )
    assert library_event(".wh.usr", isdir=False) == ("whiteout", "usr")
    assert library_event("usr/lib/.wh..wh..opq", isdir=False) == ("opaque", "usr/lib")
    assert library_event(".wh..wh..opq", isdir=False) == ("opaque", "")


def test_the_check_notes_each_layers_library_events_in_tar_order(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    lower = _layer(
        store,
        ["usr/", "usr/lib/", "./usr/lib/libc.so.6", "usr/lib/libm.so.6", "etc/libc.so.conf"],
    )
    upper = _layer(store, ["usr/lib/.wh.libm.so.6", "usr/local/lib/.wh..wh..opq"])
    assert recorded_libraries(lower, store) is None  # not checked yet
    check_base_layers([lower, upper], store)
    assert recorded_libraries(lower, store) == [
        ("library", "usr/lib/libc.so.6"),
        ("library", "usr/lib/libm.so.6"),
    ]
    assert recorded_libraries(upper, store) == [
        ("whiteout", "usr/lib/libm.so.6"),
        ("opaque", "usr/local/lib"),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "",  # emptied by a power cut
        "{not json",
        "[]",
        '{"version": "0", "digest": "@", "events": []}',  # another format
        '{"version": "1", "digest": "sha256:' + "0" * 64 + '", "events": []}',  # another blob
        '{"version": "1", "digest": "@", "events": {}}',
        '{"version": "1", "digest": "@", "events": [["library"]]}',
        '{"version": "1", "digest": "@", "events": [["library", 7]]}',
        '{"version": "1", "digest": "@", "events": [["delete", "usr/lib/x.so"]]}',
        '{"version": "1", "digest": "@", "events": ["library usr/lib/x.so"]}',
        '{"version": "1", "digest": "@"}',
    ],
)
def test_a_note_not_as_the_check_writes_it_is_a_miss(text: str, tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    layer = _layer(store, ["usr/lib/libc.so.6"])
    check_base_layers([layer], store)
    assert recorded_libraries(layer, store) == [("library", "usr/lib/libc.so.6")]
    _note(layer, store).write_text(text.replace("@", layer.descriptor.digest))
    assert recorded_libraries(layer, store) is None


def test_an_unreadable_note_is_a_miss(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    layer = _layer(store, ["usr/lib/libc.so.6"])
    _note(layer, store).mkdir(parents=True)  # not a file
    assert recorded_libraries(layer, store) is None
    _note(layer, store).rmdir()
    _note(layer, store).write_bytes(b"\xff\xfe")  # not UTF-8
    assert recorded_libraries(layer, store) is None


def test_a_layer_the_check_refuses_gets_no_note(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    unsafe = _layer(store, ["usr/lib/libc.so.6", "../escape"])
    with pytest.raises(UnsafeLayerError):
        check_base_layers([unsafe], store)
    assert not _note(unsafe, store).exists()


def test_a_blob_that_is_not_its_digest_gets_no_note(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    layer = _layer(store, ["usr/lib/libc.so.6"])
    other = _layer(store, ["usr/lib/libevil.so.1"])
    layer.path.write_bytes(other.path.read_bytes())  # the blob swapped under its digest
    with pytest.raises(OCIError, match="does not match its digest"):
        check_base_layers([layer], store)
    assert not _note(layer, store).exists()


def test_the_note_is_json_of_its_format_digest_and_events(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    layer = _layer(store, ["lib/libz.so.1"])
    check_base_layers([layer], store)
    assert json.loads(_note(layer, store).read_text()) == {
        "version": "1",
        "digest": layer.descriptor.digest,
        "events": [["library", "lib/libz.so.1"]],
    }
