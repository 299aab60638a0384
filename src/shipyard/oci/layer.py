"""Deterministic layer tarballs, streamed to a content-addressed blob store.

A layer's bytes depend only on its entries' paths, contents and executable bits
and on the clock: entries are sorted, parent directories added, owners are root
with empty names, modes are 0644/0755, every mtime is the build's clock, and the
gzip stream has no name and no time. Nothing is held in memory: the tar is
written through two hashing sinks (diff_id, then digest) to a temporary file
that is renamed to its digest.

Base layers are checked before an image is built on them: see `layercheck`.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Literal

from shipyard._fs import TEMP_PREFIX, atomic_write
from shipyard.oci.keys import GZIP_LEVEL
from shipyard.oci.model import LAYER_GZIP, Descriptor, Layer, OCIError

__all__ = [
    "GZIP_LEVEL",
    "LAYER_FORMAT",
    "BlobStore",
    "Entry",
    "HashingWriter",
    "layer_from_tarball",
    "scan_tree",
    "write_layer",
    "write_tar",
]

_CHUNK = 1 << 20
# How `write_layer` lays out a tar: bump it when that changes, so no layer noted by an
# earlier shipyard (`BlobStore.remember_made`) is reused.
LAYER_FORMAT = "1"


@dataclass(frozen=True)
class BlobStore:
    """A folder of blobs named by digest: `<root>/sha256/<hex>`."""

    root: Path

    def path(self, digest: str) -> Path:
        """Where the blob with `digest` lives (whether or not it is there yet)."""
        algorithm, _, hexdigest = digest.partition(":")
        if algorithm != "sha256" or len(hexdigest) != 64 or not hexdigest.isalnum():
            raise OCIError(f"'{digest}' is not a sha256 digest")
        return self.root / "sha256" / hexdigest

    @contextmanager
    def writer(self) -> Iterator[tuple[Path, BinaryIO]]:
        """A temporary file in the store; `commit` it, or it is removed."""
        folder = self.root / "sha256"
        folder.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=folder, prefix=TEMP_PREFIX)
        try:
            with os.fdopen(fd, "wb") as handle:
                yield Path(name), handle
        finally:
            Path(name).unlink(missing_ok=True)

    def recall(self, diff_id: str) -> Layer | None:
        """The gzip layer stored earlier for an uncompressed tar with `diff_id`, if any."""
        try:
            doc = json.loads(self.path(diff_id).with_suffix(".diff").read_text())
            layer = Layer(Descriptor(LAYER_GZIP, doc["digest"], doc["size"]), diff_id, Path())
        except (OSError, ValueError, KeyError):
            return None
        path = self.path(layer.descriptor.digest)
        if not path.is_file() or path.stat().st_size != layer.descriptor.size:
            return None
        return dataclasses.replace(layer, path=path)

    def remember(self, layer: Layer) -> None:
        """Record which gzip blob holds the tar with the layer's diff_id (see `recall`)."""
        note = self.path(layer.diff_id).with_suffix(".diff")
        doc = {"digest": layer.descriptor.digest, "size": layer.descriptor.size}
        atomic_write(note, json.dumps(doc).encode())

    def recall_made(self, key: str) -> Layer | None:
        """The layer `remember_made` noted under `key`, if its blob is still in the store.

        The blob is touched (mtime), so a prune of the cache, which removes the least
        recently used first, keeps a layer builds still reuse.
        """
        try:
            doc = json.loads(self._made_note(key).read_text())
            desc = Descriptor(LAYER_GZIP, doc["digest"], doc["size"])
            diff_id = doc["diff_id"]
            path = self.path(desc.digest)
        except (OSError, ValueError, KeyError, TypeError, OCIError):
            return None
        try:
            if path.stat().st_size != desc.size:
                return None
            os.utime(path)
        except OSError:
            return None
        return Layer(desc, str(diff_id), path)

    def remember_made(self, key: str, layer: Layer) -> None:
        """Note that the layer written from what `key` names is `layer` (see `recall_made`).

        `key` must name everything the layer's bytes depend on: its entries' paths,
        kinds, modes and contents, the clock and how it was written (`LAYER_FORMAT`,
        the compression level).
        """
        desc = layer.descriptor
        doc = {"digest": desc.digest, "size": desc.size, "diff_id": layer.diff_id}
        atomic_write(self._made_note(key), json.dumps(doc).encode())

    def _made_note(self, key: str) -> Path:
        return self.path("sha256:" + hashlib.sha256(key.encode()).hexdigest()).with_suffix(".layer")

    def commit(self, temporary: Path, digest: str) -> Path:
        """Rename a finished temporary file to its digest name (read-only from then on)."""
        target = self.path(digest)
        os.chmod(temporary, 0o444)
        os.replace(temporary, target)
        return target


@dataclass(frozen=True)
class Entry:
    """One member of a layer: a file (from disk or literal bytes), a directory or a symlink."""

    path: str
    kind: Literal["file", "dir", "symlink"] = "file"
    source: Path | None = None
    data: bytes | None = None
    link: str = ""
    executable: bool = False

    @classmethod
    def file(cls, path: str, source: Path) -> Entry:
        """A regular file copied from `source`; executable if any x bit is set there."""
        info = source.stat()
        if not stat.S_ISREG(info.st_mode):
            raise OCIError(f"{source}: not a regular file; layers hold files, dirs and symlinks")
        return cls(path, source=source, executable=bool(info.st_mode & 0o111))


class HashingWriter:
    """A write-only file object that hashes (sha256) and counts what it passes on."""

    def __init__(self, target: BinaryIO | gzip.GzipFile) -> None:
        self.target = target
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.size += len(data)
        self.target.write(data)
        return len(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self.target.flush()


def _gzip(sink: HashingWriter, level: int) -> gzip.GzipFile:
    # No file name and time 0 in the header: the bytes depend on the content only.
    return gzip.GzipFile(filename="", mode="wb", fileobj=sink, compresslevel=level, mtime=0)


def _clean(path: str) -> PurePosixPath:
    pure = PurePosixPath(path)
    bad = (
        not path
        or pure.is_absolute()
        or "\\" in path
        or "\0" in path
        or any(part in ("..", ".") for part in path.split("/"))
    )
    if bad:
        raise OCIError(f"'{path}': layer paths are relative, without '..' or '.' parts")
    if any(part.startswith(".wh.") for part in pure.parts):
        raise OCIError(f"'{path}': names starting with .wh. are OCI whiteouts, not files")
    return pure


def _ordered(entries: Iterable[Entry]) -> list[tuple[PurePosixPath, Entry]]:
    """Entries sorted by path, each preceded by the parent directories it needs."""
    given: dict[PurePosixPath, Entry] = {}
    for entry in entries:
        pure = _clean(entry.path)
        if pure in given:
            raise OCIError(f"'{entry.path}' appears twice in one layer")
        given[pure] = entry
    out: dict[PurePosixPath, Entry] = {}
    for pure in sorted(given, key=lambda p: p.parts):
        for parent in reversed(pure.parents[:-1]):
            existing = given.get(parent)
            if existing is not None and existing.kind != "dir":
                raise OCIError(f"'{parent}' is a {existing.kind} and a parent of '{pure}'")
            out.setdefault(parent, Entry(str(parent), "dir"))
        out[pure] = given[pure]
    return list(out.items())


def _header(pure: PurePosixPath, entry: Entry, epoch: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(str(pure))
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = epoch
    info.mode = 0o755 if entry.kind == "dir" or entry.executable else 0o644
    if entry.kind == "dir":
        info.type = tarfile.DIRTYPE
    elif entry.kind == "symlink":
        info.type = tarfile.SYMTYPE
        info.linkname = entry.link
        info.mode = 0o777
    return info


def _add(tar: tarfile.TarFile, pure: PurePosixPath, entry: Entry, epoch: int) -> None:
    info = _header(pure, entry, epoch)
    if entry.kind != "file":
        tar.addfile(info)
    elif entry.data is not None:
        info.size = len(entry.data)
        tar.addfile(info, BytesIO(entry.data))
    elif entry.source is not None:
        with entry.source.open("rb") as handle:
            info.size = os.fstat(handle.fileno()).st_size
            tar.addfile(info, handle)
    else:
        raise OCIError(f"'{entry.path}': a file entry needs a source or data")


def write_tar(entries: Iterable[Entry], out: BinaryIO | HashingWriter, epoch: int) -> None:
    """Write a normalised, sorted tar of `entries` (parents included) to `out`."""
    tar = tarfile.TarFile(
        fileobj=out,  # type: ignore[arg-type]
        mode="w",
        format=tarfile.PAX_FORMAT,
        copybufsize=_CHUNK,
    )
    with tar:
        for pure, entry in _ordered(entries):
            _add(tar, pure, entry, epoch)


def write_layer(
    entries: Iterable[Entry], store: BlobStore, epoch: int, *, level: int = GZIP_LEVEL
) -> Layer:
    """Write a gzip layer of `entries` into `store` and return it."""
    with store.writer() as (temporary, handle):
        blob = HashingWriter(handle)
        with _gzip(blob, level) as gz:
            diff = HashingWriter(gz)
            write_tar(entries, diff, epoch)
        handle.flush()
        digest = "sha256:" + blob.hash.hexdigest()
        path = store.commit(temporary, digest)
    return Layer(Descriptor(LAYER_GZIP, digest, blob.size), "sha256:" + diff.hash.hexdigest(), path)


def scan_tree(folder: Path, prefix: str = "", *, skip: Sequence[str] = ()) -> list[Entry]:
    """Entries for everything under `folder`, placed under `prefix` in the image.

    Symlinks stay symlinks when they point inside the tree; one that leaves it,
    device files, fifos and sockets are rejected. Top-level names in `skip` and
    __pycache__ folders are left out; empty folders are kept.
    """
    found: list[Entry] = []
    head = f"{prefix}/" if prefix else ""

    def walk(here: str, rel: str) -> None:
        with os.scandir(here) as listing:
            items = sorted(listing, key=lambda item: item.name)
        for item in items:
            name = f"{rel}{item.name}"
            if item.name == "__pycache__" or (not rel and item.name in skip):
                continue
            if item.is_symlink():
                found.append(_symlink(folder, Path(item.path), PurePosixPath(name), head + name))
            elif item.is_dir():
                size = len(found)
                walk(item.path, f"{name}/")
                if len(found) == size:
                    found.append(Entry(head + name, "dir"))
            elif item.is_file():
                mode = item.stat(follow_symlinks=False).st_mode
                found.append(
                    Entry(head + name, source=Path(item.path), executable=bool(mode & 0o111))
                )
            else:
                raise OCIError(f"{item.path}: only files, directories and symlinks go into a layer")

    walk(str(folder), "")
    return found


def _symlink(folder: Path, path: Path, rel: PurePosixPath, target: str) -> Entry:
    link = os.readlink(path)
    resolved = os.path.normpath(os.path.join(str(rel.parent), link))
    # Both as written and as the file system resolves it (through other links).
    leaves = os.path.isabs(link) or resolved == ".." or resolved.startswith("../")
    try:
        leaves = leaves or not path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):
        raise OCIError(f"{path}: a symlink loop ('{link}')") from None
    if leaves:
        raise OCIError(f"{path}: symlink to '{link}' leaves {folder}; layers keep links inside")
    return Entry(target, "symlink", link=link)


def layer_from_tarball(
    source: Path | BinaryIO,
    store: BlobStore,
    *,
    diff_id: str = "",
    level: int = GZIP_LEVEL,
) -> Layer:
    """A layer from an existing tar (a rootfs or a docker-archive layer), gzip or plain.

    A gzip tar is stored as it is (bases are not re-compressed); a plain tar is
    compressed once and remembered by its diff_id, so a later build with the same
    `diff_id` (known from a config) reuses the blob without reading the tar.
    """
    if diff_id and (known := store.recall(diff_id)) is not None:
        return known
    if isinstance(source, Path):
        with source.open("rb") as handle:
            return layer_from_tarball(handle, store, diff_id=diff_id, level=level)
    first = source.read(_CHUNK)
    diff = hashlib.sha256()
    with store.writer() as (temporary, handle):
        blob = HashingWriter(handle)
        if first[:2] == b"\x1f\x8b":
            _inflate_into(first, source, blob, diff)
        else:
            with _gzip(blob, level) as gz:
                chunk = first
                while chunk:
                    diff.update(chunk)
                    gz.write(chunk)
                    chunk = source.read(_CHUNK)
        handle.flush()
        digest = "sha256:" + blob.hash.hexdigest()
        path = store.commit(temporary, digest)
    found = "sha256:" + diff.hexdigest()
    if diff_id and found != diff_id:
        raise OCIError(f"layer {digest} has diff_id {found}, but its config says {diff_id}")
    layer = Layer(Descriptor(LAYER_GZIP, digest, blob.size), found, path)
    store.remember(layer)
    return layer


def _inflate_into(first: bytes, src: BinaryIO, blob: HashingWriter, diff: hashlib._Hash) -> None:
    """Copy a gzip stream to `blob` while hashing its inflated bytes, in bounded memory."""
    inflate = zlib.decompressobj(wbits=31)
    chunk = first
    while chunk:
        if inflate.eof:
            raise OCIError("data after the end of the gzip stream (multi-member gzip?)")
        blob.write(chunk)
        pending = chunk
        while pending and not inflate.eof:
            diff.update(inflate.decompress(pending, _CHUNK))
            pending = inflate.unconsumed_tail
        if inflate.unused_data:
            raise OCIError("data after the end of the gzip stream (multi-member gzip?)")
        chunk = src.read(_CHUNK)
    if not inflate.eof:
        raise OCIError("truncated gzip stream")
