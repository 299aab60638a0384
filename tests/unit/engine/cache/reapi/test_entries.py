"""Restore and store through a store of ActionResults and blobs (here one in memory; the
real servers are in tests/integration/test_remote_cache_protocols.py)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from shipyard.artifacts import Artifact
from shipyard.engine.cache.endpoint import RemoteStats
from shipyard.engine.cache.reapi.entries import Blob, ResultStore
from shipyard.engine.cache.reapi.results import action_for
from shipyard.engine.cache.reapi.stubs import re_pb2


class _Memory(ResultStore):
    def __init__(self) -> None:
        super().__init__()
        self.where = "memory://"
        self.stats = RemoteStats()
        self.updates = True
        self.results: dict[str, bytes] = {}
        self.blobs: dict[str, bytes] = {}

    @property
    def writable(self) -> bool:
        return self.updates

    def get_result(self, action: re_pb2.Digest) -> re_pb2.ActionResult | None:
        data = self.results.get(action.hash)
        return None if data is None else re_pb2.ActionResult.FromString(data)

    def put_result(self, action: re_pb2.Digest, result: re_pb2.ActionResult) -> None:
        self.results[action.hash] = result.SerializeToString()

    def missing(self, digests: Sequence[re_pb2.Digest]) -> set[str]:
        return {d.hash for d in digests if d.hash not in self.blobs}

    def upload(self, blobs: Sequence[Blob]) -> None:
        for digest, source in blobs:
            self.blobs[digest.hash] = source if isinstance(source, bytes) else source.read_bytes()

    def download(self, digests: Sequence[re_pb2.Digest], folder: Path) -> bool:
        for digest in digests:
            if digest.hash not in self.blobs:
                return False
            (folder / digest.hash).write_bytes(self.blobs[digest.hash])
        return True


def _another_build(store: _Memory) -> _Memory:
    """A client of another build on the same server: it knows no file `store` placed."""
    reader = _Memory()
    reader.results, reader.blobs = store.results, store.blobs
    return reader


def _built(repo: Path) -> tuple[Artifact, ...]:
    path = repo / "dist" / "zipapps" / "app.pyz"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"zipapp bytes")
    path.chmod(0o755)
    sha256 = hashlib.sha256(b"zipapp bytes").hexdigest()
    return (Artifact("zipapp", "app", "any", path, sha256, 12),)


def test_a_stored_action_is_restored_in_another_checkout(tmp_path: Path) -> None:
    store = _Memory()
    outputs = _built(tmp_path / "one")
    store.store("key", outputs, tmp_path / "one")
    # The outputs, the Action and the Command: the entry can be read without shipyard.
    assert set(store.blobs) >= {outputs[0].sha256, action_for("key").digest.hash}
    assert action_for("key").digest.hash in store.results
    reader = _another_build(store)
    restored = reader.restore("key", tmp_path / "two")
    assert restored is not None
    target = tmp_path / "two" / "dist" / "zipapps" / "app.pyz"
    assert restored[0].path == target and restored[0].describe() == outputs[0].describe()
    assert target.read_bytes() == b"zipapp bytes" and target.stat().st_mode & 0o777 == 0o755
    assert (store.stats.stored, reader.stats.hits, reader.stats.misses) == (1, 1, 0)
    assert reader.restore("other key", tmp_path / "two") is None
    assert reader.stats.misses == 1


def test_a_file_this_build_placed_or_stored_is_copied_not_downloaded(tmp_path: Path) -> None:
    """Image variants share base layers: a blob this client stored or restored is
    copied from that file; once the file changed, it is downloaded again."""
    store = _Memory()
    outputs = _built(tmp_path / "one")
    store.store("key", outputs, tmp_path / "one")
    downloads: list[str] = []
    download = store.download

    def counted(digests: Sequence[re_pb2.Digest], folder: Path) -> bool:
        downloads.extend(d.hash for d in digests)
        return download(digests, folder)

    store.download = counted  # type: ignore[method-assign]
    assert store.restore("key", tmp_path / "two") is not None
    assert downloads == []
    outputs[0].path.write_bytes(b"zipapp BYTES")  # same size, other bytes
    (tmp_path / "two" / "dist" / "zipapps" / "app.pyz").unlink()
    assert store.restore("key", tmp_path / "three") is not None
    assert downloads == [outputs[0].sha256]


def test_a_blob_with_other_bytes_is_a_miss_with_a_warning_and_nothing_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = _Memory()
    outputs = _built(tmp_path / "one")
    store.store("key", outputs, tmp_path / "one")
    store.blobs[outputs[0].sha256] = b"other bytes!"
    reader = _another_build(store)
    with caplog.at_level(logging.WARNING):
        assert reader.restore("key", tmp_path / "two") is None
    assert outputs[0].sha256 in caplog.text and "ignored" in caplog.text
    assert not (tmp_path / "two" / "dist" / "zipapps").exists()
    del store.blobs[outputs[0].sha256]  # a blob the server lost: a plain miss
    caplog.clear()
    assert reader.restore("key", tmp_path / "two") is None
    assert caplog.text == ""


def test_a_server_that_takes_no_updates_is_not_written(tmp_path: Path) -> None:
    store = _Memory()
    store.updates = False
    store.store("key", _built(tmp_path), tmp_path)
    assert store.results == {} and store.blobs == {} and store.stats.stored == 0
