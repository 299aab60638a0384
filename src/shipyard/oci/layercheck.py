"""Base layer safety: refuse a base whose layers would write outside their root.

Base layers are never unpacked here, but they are checked before an image is
built on them (`check_base_layers`), so shipyard does not hand on an image whose
layers, unpacked in order, would write outside the root an unpacking tool gives
them: each layer alone and the tree they merge into are checked.

The check reads every entry of every layer, so it also notes, per layer, what the
image builder's native library check needs from a base (`library_event`: the shared
objects in the library folders and the whiteouts), beside the blob and keyed by its
digest (`recorded_libraries`): a base's layers are decompressed once, by the check.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import stat
import tarfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from shipyard._fs import atomic_write, sha256_file
from shipyard.errors import UsageError
from shipyard.oci.layer import BlobStore
from shipyard.oci.model import Layer, OCIError

__all__ = [
    "LIBRARY_FOLDERS",
    "LibraryEvent",
    "UnsafeLayerError",
    "check_base_layer",
    "check_base_layers",
    "library_event",
    "recorded_libraries",
]

_CHUNK = 1 << 20
_AHEAD = 1 << 17  # what a hashed stream reads at once
# Part of every check note: bump it when the rules change, so every base is checked again.
_RULES = "3"
_ZSTD = b"\x28\xb5\x2f\xfd"
_OPAQUE = ".wh..wh..opq"
# Where the dynamic loader (and ld.so.conf on Debian, Ubuntu, RHEL, Alpine) looks.
LIBRARY_FOLDERS = ("lib/", "lib64/", "lib32/", "usr/lib/", "usr/lib64/", "usr/local/lib/")
# Part of every library note: bump it when what `library_event` gives changes.
_LIBRARIES_VERSION = "1"
_LIBRARY_KINDS = frozenset({"library", "whiteout", "opaque"})

LibraryEvent = tuple[str, str]
"""("library", path), ("whiteout", path removed with all below it), ("opaque", folder
whose lower layers' contents are removed); paths relative, without "./" parts."""


class UnsafeLayerError(OCIError, UsageError):
    """A base layer that would write outside its root when unpacked (exit 2: use another base)."""


class _HashingReader:
    """A read-only file object that hashes what passes through it.

    It reads its source `_AHEAD` bytes at a time and hands them out in the small
    pieces tarfile and gzip ask for (10 and 8 KiB): fewer, larger reads, inflates
    and hash updates for the same bytes (the hash is of everything read, and the
    check reads every stream to its end).
    """

    def __init__(self, source: BinaryIO | gzip.GzipFile) -> None:
        self.source = source
        self.hash = hashlib.sha256()
        self.buffer = b""
        self.at = 0  # where in `buffer` the next read starts

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            rest = self.buffer[self.at :] + self._fill(-1)
            self.buffer, self.at = b"", 0
            return rest
        if len(self.buffer) - self.at < size:
            self.buffer = self.buffer[self.at :] + self._fill(max(size, _AHEAD))
            self.at = 0
        data = self.buffer[self.at : self.at + size]
        self.at += len(data)
        return data

    def _fill(self, size: int) -> bytes:
        data = self.source.read(size)
        self.hash.update(data)
        return data

    def seek(self, offset: int) -> int:
        raise OSError("a hashed stream is read once, front to back")


@dataclass(frozen=True)
class _Link:
    """A symlink of the merged tree: its target and the layer (index) that made it."""

    target: str
    layer: int


class _MergedTree:
    """The symlinks of the tree that unpacking the layers read so far, in order, leaves.

    Only links matter: an unpacker writes through a link that lies above an
    entry's path. Whiteouts remove what lower layers made (a `.wh.<name>` the
    path and all below it, an opaque `.wh..wh..opq` all of its folder); an entry
    at the very path of a lower layer's link replaces that link, as Docker,
    containerd and GNU tar unpack (they remove it first).
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.names = names  # how messages name each layer
        self.layer = 0  # the index of the layer being read
        self.links: dict[str, _Link] = {}
        self.below: dict[str, int] = {}  # links under each folder ("" is the root)

    def _ancestors(self, path: str) -> list[str]:
        parts = path.split("/")
        return ["", *("/".join(parts[:end]) for end in range(1, len(parts)))]

    def add(self, path: str, target: str) -> None:
        """Note a link the current layer makes at `path`."""
        self.remove(path)
        self.links[path] = _Link(target, self.layer)
        for folder in self._ancestors(path):
            self.below[folder] = self.below.get(folder, 0) + 1

    def remove(self, path: str) -> None:
        """Forget the link at `path`, if there is one."""
        if self.links.pop(path, None) is not None:
            for folder in self._ancestors(path):
                self.below[folder] -= 1

    def clear(self, path: str, *, itself: bool = True, below: bool = True) -> None:
        """Forget the lower layers' links at `path` and (or) under it (`""` is the root)."""
        if itself and path in self.links and self.links[path].layer < self.layer:
            self.remove(path)
        if below and self.below.get(path, 0):
            head = f"{path}/" if path else ""
            for name in [n for n, link in self.links.items() if link.layer < self.layer]:
                if name.startswith(head):
                    self.remove(name)

    def through(self, path: str, *, own: bool) -> tuple[str, _Link] | None:
        """The link an unpacker would follow to write `path` (its target, when `own` is
        False, is looked up as a hard link's: only the folders above it count)."""
        parts = path.split("/")
        for end in range(1, len(parts) + 1):
            prefix = "/".join(parts[:end])
            link = self.links.get(prefix)
            if link is None:
                continue
            # The path itself: a link of a lower layer is removed before the entry
            # is written (it replaces it); one of the same layer is refused, as a
            # tar that writes over its own link is never what an image builder makes.
            if end == len(parts) and (not own or link.layer < self.layer):
                continue
            return prefix, link
        return None

    def made_by(self, link: _Link) -> str:
        """Which layer made `link`, for messages."""
        if link.layer == self.layer:
            return "that the layer made"
        return f"that {self.names[link.layer]} made"


def library_event(path: str, *, isdir: bool) -> LibraryEvent | None:
    """What the entry at `path` (relative, normalized) means for the base's libraries:
    a whiteout, an opaque whiteout, a shared object's file (or link) in a library
    folder, or nothing."""
    folder, _, base = path.rpartition("/")
    if base == _OPAQUE:
        return ("opaque", folder)
    if base.startswith(".wh."):
        return ("whiteout", f"{folder}/{base[4:]}" if folder else base[4:])
    if not isdir and path.startswith(LIBRARY_FOLDERS) and ".so" in base:
        return ("library", path)
    return None


def _library_note(digest: str, store: BlobStore) -> Path:
    return store.path(digest).with_suffix(".libs")


def recorded_libraries(layer: Layer, store: BlobStore) -> list[LibraryEvent] | None:
    """The library events (`library_event`, in tar order) the base layer check noted
    for the blob of `layer`, or None when there is no valid note (missing, of another
    format or digest, or unreadable: read the layer instead)."""
    digest = layer.descriptor.digest
    try:
        data = json.loads(_library_note(digest, store).read_bytes())
    except (OSError, ValueError, OCIError):
        return None
    if not (
        isinstance(data, dict)
        and data.get("version") == _LIBRARIES_VERSION
        and data.get("digest") == digest
        and isinstance(events := data.get("events"), list)
    ):
        return None
    found: list[LibraryEvent] = []
    for event in events:
        if not (
            isinstance(event, list)
            and len(event) == 2
            and event[0] in _LIBRARY_KINDS
            and isinstance(event[1], str)
        ):
            return None
        found.append((event[0], event[1]))
    return found


def _note_libraries(layer: Layer, events: list[LibraryEvent], store: BlobStore) -> None:
    """Keep a checked layer's library events beside its blob (a blob is its digest)."""
    digest = layer.descriptor.digest
    note = _library_note(digest, store)
    doc = {"version": _LIBRARIES_VERSION, "digest": digest, "events": events}
    note.parent.mkdir(parents=True, exist_ok=True)
    # Not durable: a note a power cut empties reads as none, and the layer is read again.
    atomic_write(note, json.dumps(doc).encode(), durable=False)


def check_base_layer(layer: Layer, store: BlobStore) -> None:
    """Refuse a base layer whose tar would write outside the root it is unpacked into.

    The same checks as `check_base_layers` for an image of this one layer.
    """
    check_base_layers([layer], store)


def check_base_layers(layers: Sequence[Layer], store: BlobStore) -> None:
    """Refuse a base image whose layers, unpacked in order, would write outside the root.

    Names and hard-link targets must be relative and free of '..'; no entry may
    be written through a symlink of the tree merged so far (made by this layer
    or a lower one and not removed by a whiteout or a replacing entry since),
    nor over a symlink its own layer made; a hard link to a symlink is one too;
    a whiteout must name something. Each blob must match its digest and diff_id.
    Setuid programs and device nodes are normal in a root file system (su,
    /dev/null) and stay: shipyard never unpacks a base, and changing one would
    change its digest. Entry problems raise `UnsafeLayerError` (exit 2), naming
    the layer (index and digest) and the path. A passed check is noted in
    `store`, so an image's blobs are read once; so are each checked layer's library
    events (`recorded_libraries`).
    """
    count = len(layers)
    names = [
        f"base layer {i} of {count} ({layer.descriptor.digest})"
        if count > 1
        else f"base layer {layer.descriptor.digest}"
        for i, layer in enumerate(layers, 1)
    ]
    stamps = []
    for layer, where in zip(layers, names, strict=True):
        try:
            info = layer.path.stat()
        except OSError as exc:
            raise OCIError(f"{where}: {layer.path} cannot be read ({exc.strerror})") from None
        if not stat.S_ISREG(info.st_mode):
            raise OCIError(f"{where}: {layer.path} is not a regular file")
        stamps.append(
            f"{_RULES}:{layer.descriptor.digest}:{layer.diff_id}:{info.st_dev}:{info.st_ino}:"
            f"{info.st_size}:{info.st_mtime_ns}"
        )
    chain = hashlib.sha256("\n".join(x.descriptor.digest for x in layers).encode()).hexdigest()
    note = store.path("sha256:" + chain).with_suffix(".checked")
    text = "\n".join(stamps)
    try:
        if note.read_text() == text:
            return
    except OSError:
        pass
    tree = _MergedTree(names)
    for index, layer in enumerate(layers):
        tree.layer = index
        events: list[LibraryEvent] = []
        _check_one(layer, tree, events)
        _note_libraries(layer, events, store)
    atomic_write(note, text.encode())


def _check_one(layer: Layer, tree: _MergedTree, events: list[LibraryEvent]) -> None:
    """Read one layer's blob in full: its entries against `tree` (their library events
    added to `events`), its digest and diff_id."""
    path, digest, where = layer.path, layer.descriptor.digest, tree.names[tree.layer]
    try:
        blob_hash, diff_hash = _read_layer(path, tree, events)
    except (OSError, EOFError, zlib.error, tarfile.TarError, OCIError) as exc:
        # A blob that is not what its digest says is the first thing to report.
        blob_hash = "sha256:" + sha256_file(path)
        if blob_hash == digest:
            if isinstance(exc, OCIError):
                raise
            raise OCIError(f"{where}: not a readable tar layer ({exc})") from None
    if blob_hash != digest:
        raise OCIError(f"{where}: {path} does not match its digest (it is {blob_hash})")
    if layer.diff_id and diff_hash != layer.diff_id:
        raise OCIError(f"{where}: its tar has diff_id {diff_hash}, its config says {layer.diff_id}")


def _read_layer(path: Path, tree: _MergedTree, events: list[LibraryEvent]) -> tuple[str, str]:
    """Check every entry of the (gzip) tar at `path`; its digest and diff_id, as read."""
    where = tree.names[tree.layer]
    with path.open("rb") as handle:
        magic = handle.read(4)
        handle.seek(0)
        if magic == _ZSTD:
            raise OCIError(f"{where}: zstd layers cannot be checked; use a gzip base image")
        blob = _HashingReader(handle)
        if magic[:2] == b"\x1f\x8b":
            with gzip.GzipFile(fileobj=blob, mode="rb") as inflated:
                tar_stream = _HashingReader(inflated)
                _check_entries(tar_stream, tree, events)
                _only_zeros_after(tar_stream, where)
            diff = tar_stream.hash
        else:
            _check_entries(blob, tree, events)
            _only_zeros_after(blob, where)
            diff = blob.hash
    return "sha256:" + blob.hash.hexdigest(), "sha256:" + diff.hexdigest()


def _only_zeros_after(stream: _HashingReader, where: str) -> None:
    """Read the rest of the tar (its end blocks and padding count in the diff_id),
    refusing anything but zeros there (a partial block tarfile could not read)."""
    while chunk := stream.read(_CHUNK):
        if chunk.strip(b"\0"):
            raise UnsafeLayerError(
                f"{where}: data after the end of the tar archive (an invalid header, or a "
                "second archive appended); unpackers differ on it, so the layer is refused"
            )


def _inside(name: str, what: str, where: str) -> str:
    """`name` without './' and '/' padding; refused when absolute or with '..' parts."""
    if name.startswith("/"):
        raise UnsafeLayerError(
            f"{where}: {what} '{name}' is an absolute path; layer paths are relative"
        )
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UnsafeLayerError(
            f"{where}: {what} '{name}' has a '..' part, which leaves the layer's root"
        )
    return "/".join(parts)


def _check_entries(stream: _HashingReader, tree: _MergedTree, events: list[LibraryEvent]) -> None:
    # ignore_zeros: go on past end blocks and blocks that are no valid header, as
    # GNU tar does; otherwise tarfile ends the stream there and any entry after
    # such a block would be unpacked without having been checked.
    with tarfile.open(  # type: ignore[call-overload]
        fileobj=stream, mode="r|", ignore_zeros=True
    ) as tar:
        _check_members(tar, tree, events)


def _check_members(tar: tarfile.TarFile, tree: _MergedTree, events: list[LibraryEvent]) -> None:
    where = tree.names[tree.layer]
    while (member := tar.next()) is not None:
        tar.members.clear()  # type: ignore[attr-defined]  # read once: headers must not pile up
        name = _inside(member.name, "entry", where)
        # Neither the entry nor a hard link's target may lie below a link, and the
        # entry may not replace a link of its own layer (an unpacker writes through).
        target = ""
        paths = [(name, True)]
        if member.islnk():
            target = _inside(member.linkname, f"hard link '{member.name}' ->", where)
            paths.append((target, False))
        for path, own in paths:
            if (found := tree.through(path, own=own)) is not None:
                prefix, link = found
                raise UnsafeLayerError(
                    f"{where}: entry '{member.name}' is written through the symlink "
                    f"'{prefix}' -> '{link.target}' {tree.made_by(link)}; "
                    "use a base image whose layers keep their files off links"
                )
        folder, _, base = name.rpartition("/")
        if base == _OPAQUE:
            tree.clear(folder, itself=False)
        elif base.startswith(".wh."):
            if base[4:] in ("", ".", ".."):
                raise UnsafeLayerError(f"{where}: whiteout '{member.name}' names no file")
            tree.clear(f"{folder}/{base[4:]}" if folder else base[4:])
        else:
            # Only the link at the path itself: an unpacker that fails to replace a
            # folder by a file (GNU tar goes on) leaves the links below it in place.
            tree.clear(name, below=False)
            if member.issym():
                tree.add(name, member.linkname)
            elif member.islnk() and target in tree.links:
                # link(2) does not follow: a hard link to a symlink is another symlink.
                tree.add(name, tree.links[target].target)
        if (event := library_event(name, isdir=member.isdir())) is not None:
            events.append(event)
