"""Deterministic, streamed layers: same inputs give the same bytes, whatever the disk says."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import time
import tracemalloc
from pathlib import Path

import pytest

from shipyard.oci.layer import BlobStore, Entry, layer_from_tarball, scan_tree, write_layer
from shipyard.oci.model import Layer, OCIError

EPOCH = 1704067200


def _members(layer: Layer) -> list[tarfile.TarInfo]:
    with tarfile.open(layer.path, "r:gz") as tar:
        return tar.getmembers()


def _tree(root: Path, order: list[str], mtime: int, private: bool) -> Path:
    files = {"pkg/__init__.py": b"x = 1\n", "pkg/data/a.txt": b"a", "tool": b"#!/bin/sh\n"}
    for name in order:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(files[name])
        path.chmod(0o700 if name == "tool" else 0o600 if private else 0o664)
        os.utime(path, (mtime, mtime))
    (root / "empty").mkdir()
    (root / "pkg" / "link").symlink_to("data/a.txt")
    return root


def test_layer_bytes_ignore_order_times_and_permissions(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "store")
    names = ["pkg/__init__.py", "pkg/data/a.txt", "tool"]
    one = _tree(tmp_path / "one", names, 1_000_000, private=False)
    two = _tree(tmp_path / "two", names[::-1], 2_000_000, private=True)
    first = write_layer(scan_tree(one, "opt/app"), store, EPOCH)
    second = write_layer(scan_tree(two, "opt/app"), store, EPOCH)
    if first.descriptor.digest != second.descriptor.digest:
        a = {m.name: m.get_info() for m in _members(first)}
        b = {m.name: m.get_info() for m in _members(second)}
        differ = sorted(n for n in a.keys() | b.keys() if a.get(n) != b.get(n))
        pytest.fail(f"layers differ in entries {differ}")
    assert first == second
    later = write_layer(scan_tree(one, "opt/app"), store, EPOCH + 1)
    assert later.descriptor.digest != first.descriptor.digest


def test_layer_entries_are_normalised_sorted_and_have_parents(tmp_path: Path) -> None:
    root = _tree(tmp_path / "t", ["tool", "pkg/data/a.txt", "pkg/__init__.py"], 5, private=True)
    layer = write_layer(scan_tree(root, "opt/app"), BlobStore(tmp_path / "s"), EPOCH)
    members = _members(layer)
    assert [m.name for m in members] == [
        "opt",
        "opt/app",
        "opt/app/empty",
        "opt/app/pkg",
        "opt/app/pkg/__init__.py",
        "opt/app/pkg/data",
        "opt/app/pkg/data/a.txt",
        "opt/app/pkg/link",
        "opt/app/tool",
    ]
    modes = {m.name: m.mode for m in members}
    assert modes["opt/app/pkg"] == 0o755 and modes["opt/app/tool"] == 0o755
    assert modes["opt/app/pkg/__init__.py"] == 0o644
    assert all((m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "", "", EPOCH) for m in members)
    link = next(m for m in members if m.name == "opt/app/pkg/link")
    assert link.issym() and link.linkname == "data/a.txt"


def test_digest_and_diff_id_hash_the_blob_and_the_tar(tmp_path: Path) -> None:
    layer = write_layer([Entry("a", data=b"hello")], BlobStore(tmp_path), EPOCH)
    blob = layer.path.read_bytes()
    assert layer.path.name == layer.descriptor.digest.partition(":")[2]
    assert layer.descriptor.digest == "sha256:" + hashlib.sha256(blob).hexdigest()
    assert layer.descriptor.size == len(blob)
    assert layer.diff_id == "sha256:" + hashlib.sha256(gzip.decompress(blob)).hexdigest()
    assert blob[3] & 0x08 == 0, "gzip header must carry no file name"
    assert blob[4:8] == b"\0\0\0\0", "gzip header must carry no time"


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a/../../b", "a/./b", "", "a/.wh.b"])
def test_paths_that_escape_or_whiteout_are_rejected(tmp_path: Path, path: str) -> None:
    with pytest.raises(OCIError):
        write_layer([Entry(path, data=b"x")], BlobStore(tmp_path), EPOCH)


def test_symlinks_leaving_the_tree_are_rejected(tmp_path: Path) -> None:
    (tmp_path / "t" / "sub").mkdir(parents=True)
    (tmp_path / "t" / "sub" / "up").symlink_to("../../outside")
    with pytest.raises(OCIError, match="leaves"):
        scan_tree(tmp_path / "t")
    (tmp_path / "u").mkdir()
    (tmp_path / "u" / "abs").symlink_to("/etc/passwd")
    with pytest.raises(OCIError, match="leaves"):
        scan_tree(tmp_path / "u")


def test_device_files_and_fifos_are_rejected(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(OCIError, match="only files"):
        scan_tree(tmp_path)
    with pytest.raises(OCIError, match="not a regular file"):
        Entry.file("dev/null", Path("/dev/null"))


def test_duplicate_paths_and_files_used_as_folders_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(OCIError, match="twice"):
        write_layer([Entry("a", data=b""), Entry("a", data=b"")], BlobStore(tmp_path), EPOCH)
    with pytest.raises(OCIError, match="parent"):
        write_layer([Entry("a", data=b""), Entry("a/b", data=b"")], BlobStore(tmp_path), EPOCH)


def test_big_layers_stream_through_bounded_memory(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    with big.open("wb") as handle:
        for _ in range(32):
            handle.write(os.urandom(1 << 20))
    tracemalloc.start()
    try:
        layer = write_layer([Entry.file("big.bin", big)], BlobStore(tmp_path / "s"), EPOCH)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert layer.descriptor.size > 32 << 20
    assert peak < 8 << 20, f"peak {peak} bytes for a 32 MiB layer"


def _plain_tar(path: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("etc/os-release")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"ID\n"))
    path.write_bytes(buffer.getvalue())
    return buffer.getvalue()


def test_plain_tarballs_are_compressed_once_then_recalled(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "s")
    data = _plain_tar(tmp_path / "rootfs.tar")
    layer = layer_from_tarball(tmp_path / "rootfs.tar", store)
    assert layer.diff_id == "sha256:" + hashlib.sha256(data).hexdigest()
    assert gzip.decompress(layer.path.read_bytes()) == data
    (tmp_path / "rootfs.tar").unlink()  # a recalled layer never reads its source
    again = layer_from_tarball(tmp_path / "rootfs.tar", store, diff_id=layer.diff_id)
    assert again == layer


def test_gzip_tarballs_are_stored_unchanged(tmp_path: Path) -> None:
    data = _plain_tar(tmp_path / "rootfs.tar")
    packed = gzip.compress(data, compresslevel=1, mtime=int(time.time()))
    (tmp_path / "rootfs.tar.gz").write_bytes(packed)
    layer = layer_from_tarball(tmp_path / "rootfs.tar.gz", BlobStore(tmp_path / "s"))
    assert layer.path.read_bytes() == packed
    assert layer.diff_id == "sha256:" + hashlib.sha256(data).hexdigest()
    with pytest.raises(OCIError, match="config says"):
        layer_from_tarball(
            io.BytesIO(packed), BlobStore(tmp_path / "t"), diff_id="sha256:" + "0" * 64
        )


def test_a_noted_layer_is_recalled_while_its_blob_is_in_the_store(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "store")
    assert store.recall_made("key") is None
    made = write_layer([Entry("a", data=b"x")], store, 0)
    store.remember_made("key", made)
    assert store.recall_made("key") == made
    assert store.recall_made("other key") is None
    os.utime(made.path, (0, 0))
    store.recall_made("key")
    assert made.path.stat().st_mtime > 0, "a recalled blob counts as used (LRU prune)"
    os.chmod(made.path, 0o644)
    made.path.write_bytes(b"truncated")
    assert store.recall_made("key") is None, "a blob of another size is not the layer"
    made.path.unlink()
    assert store.recall_made("key") is None
