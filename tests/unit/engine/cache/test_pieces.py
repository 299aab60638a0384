"""A cache that stays small (issue 28, item 6): a tar output (an image archive) is stored
in pieces cut at its members, so the layers it shares with the image's layout, and with
the last commit's archive, are stored once."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import logging
import os
import tarfile
from pathlib import Path

import pytest

from shipyard._fs import sha256_file
from shipyard.artifacts import Artifact
from shipyard.engine.cache.checks import Declared
from shipyard.engine.cache.local import ActionCache
from shipyard.engine.cache.pieces import PIECE_MIN, SPLIT_MIN, tar_spans
from shipyard.engine.cache.usage import contents

BASE = os.urandom(SPLIT_MIN)  # a base layer: the same in every image and commit
IMAGES = Declared((("dist", "images", "**"),))


def _archive(path: Path, layers: list[bytes]) -> Path:
    """A `docker load` tarball holding `layers` (as blobs/sha256/<digest>) and a small
    manifest, written the same way every time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as archive:
        names = []
        for layer in layers:
            name = f"blobs/sha256/{hashlib.sha256(layer).hexdigest()}"
            names.append(name)
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(layer), 1704067200
            archive.addfile(info, io.BytesIO(layer))
        manifest = json.dumps([{"Layers": names}]).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size, info.mtime = len(manifest), 1704067200
        archive.addfile(info, io.BytesIO(manifest))
    return path


def _image(repo: Path, binary: str, app: bytes) -> tuple[Artifact, ...]:
    """An image action's outputs: the layout's two layer blobs and the archive of both."""
    outputs = []
    for layer in (BASE, app):
        blob = repo / "dist" / "images" / binary / "blobs" / hashlib.sha256(layer).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(layer)
        outputs.append(("image-layout", blob))
    tar = _archive(repo / "dist" / "images" / f"{binary}-linux_amd64.tar", [BASE, app])
    outputs.append(("image-archive", tar))
    return tuple(
        Artifact(kind, binary, "linux/amd64", p, sha256_file(p), p.stat().st_size)
        for kind, p in outputs
    )


def _files(repo: Path) -> dict[str, str]:
    return {
        str(p.relative_to(repo)): sha256_file(p)
        for p in sorted((repo / "dist").rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


def test_a_tar_is_cut_at_its_large_members(tmp_path: Path) -> None:
    app = os.urandom(PIECE_MIN)
    tar = _archive(tmp_path / "a.tar", [BASE, b"small", app])
    spans = tar_spans(tar)
    assert spans is not None
    assert spans[0][0] == 0 and sum(length for _, length in spans) == tar.stat().st_size
    assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(spans))
    data = tar.read_bytes()
    pieces = [data[a : a + n] for a, n in spans]
    assert BASE in pieces and app in pieces, "each large member is a piece of its own"
    assert not any(p == b"small" for p in pieces), "a small member stays with the headers"


def test_what_is_not_a_large_plain_tar_is_stored_whole(tmp_path: Path) -> None:
    small = _archive(tmp_path / "small.tar", [b"x" * 1000])
    (tmp_path / "layer.bin").write_bytes(small.read_bytes() + BASE)
    (tmp_path / "fake.tar").write_bytes(os.urandom(SPLIT_MIN + 10))
    renamed = tmp_path / "a.tgz"
    _archive(renamed, [BASE])
    for path in (small, tmp_path / "layer.bin", tmp_path / "fake.tar", renamed):
        assert tar_spans(path) is None, path.name


def test_identical_blobs_are_stored_once_across_actions(tmp_path: Path) -> None:
    """Two image actions (two binaries, or two commits) sharing the base layer: the
    layer is one blob, named by both layouts and both archives; each restores its
    outputs' exact bytes."""
    repo, cache = tmp_path / "repo", ActionCache(tmp_path / "cache")
    first = _image(repo, "app", os.urandom(PIECE_MIN))
    cache.store("k1", first, repo)
    second = _image(repo, "app2", os.urandom(PIECE_MIN))
    cache.store("k2", second, repo)
    base = hashlib.sha256(BASE).hexdigest()
    assert (cache.blobs / base).read_bytes() == BASE
    assert [p.name for p in cache.blobs.iterdir()].count(base) == 1
    found = contents(cache.dir)
    logical = sum(a.size for a in first + second)
    assert found.logical == logical and found.entries == 2
    assert found.stored < logical - 3 * len(BASE), "the base layer is stored once, not 4 times"
    assert found.stored == sum(p.stat().st_size for p in cache.blobs.iterdir())
    assert found.largest_blobs[0].sha256 == base and found.largest_blobs[0].entries == 2
    assert found.largest_blobs[0].kinds == ("image-layout", "image-archive")
    assert [k.kind for k in found.kinds] == ["image-layout", "image-archive"]
    assert sum(k.stored for k in found.kinds) == found.stored

    want = _files(repo)
    elsewhere = tmp_path / "clone"
    elsewhere.mkdir()
    for key in ("k1", "k2"):
        restored = cache.restore(key, elsewhere, IMAGES)
        assert restored is not None
        assert [(a.kind, a.sha256) for a in restored] == [
            (a.kind, a.sha256) for a in (first if key == "k1" else second)
        ]
    assert _files(elsewhere) == want, "paths and bytes as built"


def test_a_corrupted_piece_is_a_miss_and_a_rebuild_stores_it_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repo, cache = tmp_path / "repo", ActionCache(tmp_path / "cache")
    outputs = _image(repo, "app", os.urandom(PIECE_MIN))
    cache.store("k1", outputs, repo)
    base = cache.blobs / hashlib.sha256(BASE).hexdigest()
    base.write_bytes(b"!" + BASE[1:])  # same size, other bytes
    elsewhere = tmp_path / "clone"
    elsewhere.mkdir()
    with caplog.at_level(logging.WARNING, logger="shipyard"):
        assert cache.restore("k1", elsewhere, IMAGES) is None
    assert any("ignored and removed" in r.getMessage() for r in caplog.records)
    assert not base.exists(), "the bad blob is removed"
    assert not (cache.actions / "k1.json").exists()
    assert not (elsewhere / "dist" / "images").exists() or _files(elsewhere) == {}
    cache.store("k1", outputs, repo)  # what the build that follows the miss does
    assert cache.restore("k1", elsewhere, IMAGES) is not None
    assert _files(elsewhere) == _files(repo)


def test_an_entry_whose_pieces_make_other_bytes_is_refused(tmp_path: Path) -> None:
    """Every piece is a whole blob, but together they are not the output the entry
    names: a miss that removes the entry and keeps the honest blobs."""
    repo, cache = tmp_path / "repo", ActionCache(tmp_path / "cache")
    cache.store("k1", _image(repo, "app", os.urandom(PIECE_MIN)), repo)
    path = cache.actions / "k1.json"
    entry = json.loads(path.read_text())
    archive = entry["outputs"][2]
    archive["parts"] = [*archive["parts"][1:], archive["parts"][0]]  # reordered
    path.write_text(json.dumps(entry))
    blobs = sorted(p.name for p in cache.blobs.iterdir())
    (tmp_path / "clone").mkdir()
    assert cache.restore("k1", tmp_path / "clone", IMAGES) is None
    assert not path.exists()
    assert sorted(p.name for p in cache.blobs.iterdir()) == blobs


def test_prune_removes_the_pieces_no_entry_names(tmp_path: Path) -> None:
    repo, cache = tmp_path / "repo", ActionCache(tmp_path / "cache")
    cache.store("old", _image(repo, "app", os.urandom(PIECE_MIN)), repo)
    os.utime(cache.actions / "old.json", (1, 1))
    kept = _image(repo, "app", os.urandom(PIECE_MIN))
    cache.store("new", kept, repo)
    orphan = cache.blobs / ("d" * 64)
    orphan.write_bytes(b"left by a killed build")
    before = {p.name for p in cache.blobs.iterdir()}
    result = cache.prune(contents(cache.dir).stored)  # only room for what `new` names
    assert result.removed_entries == 1 and not (cache.actions / "old.json").exists()
    after = {p.name for p in cache.blobs.iterdir()}
    assert not orphan.exists() and after < before
    assert hashlib.sha256(BASE).hexdigest() in after, "the shared layer stays"
    named = contents(cache.dir)
    assert named.unnamed == 0 and named.stored == sum(
        (cache.blobs / name).stat().st_size for name in after
    )
    elsewhere = tmp_path / "clone"
    elsewhere.mkdir()
    assert cache.restore("new", elsewhere, IMAGES) is not None
    assert cache.restore("old", elsewhere, IMAGES) is None


@pytest.mark.parametrize(
    "parts",
    [
        "not a list",
        [],
        [["a" * 64]],
        [["A" * 64, 10]],
        [["../" + "a" * 61, 10]],
        [["a" * 64, -1]],
        [["a" * 64, True]],
        "too many",
        "do not add up",
        "a symbolic link",
    ],
)
def test_hostile_parts_are_a_miss_that_writes_nothing(parts: object, tmp_path: Path) -> None:
    repo, cache = tmp_path / "repo", ActionCache(tmp_path / "cache")
    cache.store("k1", _image(repo, "app", os.urandom(PIECE_MIN)), repo)
    path = cache.actions / "k1.json"
    entry = json.loads(path.read_text())
    archive = entry["outputs"][2]
    if parts == "too many":
        parts = [["e" * 64, 0]] * 100_001
    elif parts == "do not add up":
        parts = [*archive["parts"], archive["parts"][0]]
    elif parts == "a symbolic link":  # to a file outside with the very bytes named
        (cache.blobs / archive["sha256"]).symlink_to(repo / archive["path"])
        parts = [[archive["sha256"], archive["size"]]]
    archive["parts"] = parts
    path.write_text(json.dumps(entry))
    clone = tmp_path / "clone"
    clone.mkdir()
    assert cache.restore("k1", clone, IMAGES) is None
    assert not path.exists() and not (clone / "dist").exists()


def test_a_whole_blob_is_linked_into_place_when_it_is_ours_with_the_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A layout blob (0644) is a hard link to the cache's blob; a zipapp (0755) and an
    archive in pieces are copies; a blob owned by someone else is copied too."""
    repo, cache = tmp_path / "repo", ActionCache(tmp_path / "cache")
    outputs = _image(repo, "app", os.urandom(PIECE_MIN))
    pyz = repo / "dist" / "zipapps" / "app.pyz"
    pyz.parent.mkdir(parents=True)
    pyz.write_bytes(os.urandom(1000))
    pyz.chmod(0o755)
    zipapp = Artifact("zipapp", "app", "linux/amd64", pyz, sha256_file(pyz), 1000)
    cache.store("k1", outputs, repo)
    cache.store("k2", (zipapp,), repo)
    anywhere = Declared((("dist", "**"),))
    clone = tmp_path / "clone"
    clone.mkdir()
    assert cache.restore("k1", clone, IMAGES) is not None
    assert cache.restore("k2", clone, anywhere) is not None
    layer, _, tar = (clone / a.path.relative_to(repo) for a in outputs)
    assert layer.stat().st_ino == (cache.blobs / layer.name).stat().st_ino
    assert oct(layer.stat().st_mode & 0o777) == oct(0o644)
    assert tar.stat().st_nlink == 1
    restored = clone / "dist" / "zipapps" / "app.pyz"
    assert restored.stat().st_nlink == 1 and restored.stat().st_mode & 0o777 == 0o755
    assert _files(clone) == _files(repo)

    other = tmp_path / "other"
    other.mkdir()
    real = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: real + 1)  # the blobs are someone else's
    assert cache.restore("k1", other, IMAGES) is not None
    assert (other / layer.relative_to(clone)).stat().st_nlink == 1
    assert _files(other) == {k: v for k, v in _files(repo).items() if "/images/" in k}


def test_a_linked_blob_with_other_bytes_is_a_miss(tmp_path: Path) -> None:
    repo, cache = tmp_path / "repo", ActionCache(tmp_path / "cache")
    outputs = _image(repo, "app", os.urandom(PIECE_MIN))
    cache.store("k1", outputs, repo)
    app = cache.blobs / outputs[1].sha256
    app.write_bytes(b"!" * app.stat().st_size)
    clone = tmp_path / "clone"
    clone.mkdir()
    assert cache.restore("k1", clone, IMAGES) is None
    assert not app.exists() and not (clone / "dist").exists()
