"""Storing a large tar output as pieces, so the layers it shares with other outputs are
stored once.

An image archive (`docker load` tarball) holds the same layer blobs as the image's
OCI layout beside it, and each commit's archive holds the same base layers as the
last one: stored whole, every archive costs its full size again. Cut at its members
instead, a tar is a list of pieces: each member of at least `PIECE_MIN` bytes is
one piece (the bytes of a layout blob with the same digest, stored once), and the
tar headers and small members between them are pieces of their own. The cache keeps
each piece as a blob named by its sha256; the output is their concatenation.

Only outputs of at least `SPLIT_MIN` bytes whose name ends in `.tar` are cut, and
only when Python's tarfile reads them as an uncompressed tar whose members lie in
order inside the file. Anything else is stored whole.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tarfile
import tempfile
from pathlib import Path
from typing import IO

from shipyard._fs import TEMP_PREFIX

__all__ = ["PIECE_MIN", "SPLIT_MIN", "Piece", "store_pieces", "tar_spans"]

SPLIT_MIN = 1 << 20  # a smaller tar gains little from being cut
PIECE_MIN = 64 << 10  # a smaller member stays inside the piece of headers around it
_CHUNK = 1 << 20

Piece = tuple[str, int]  # (sha256, size) of one blob of a stored output


def tar_spans(path: Path) -> list[tuple[int, int]] | None:
    """The (offset, length) spans a tar at `path` is cut into, in order, covering the
    whole file; None when it is not worth cutting or not a plain tar."""
    if path.suffix != ".tar":
        return None
    try:
        size = path.stat().st_size
        if size < SPLIT_MIN:
            return None
        with tarfile.open(path, "r:") as archive:
            members = [
                (m.offset_data, m.size) for m in archive if m.isfile() and m.size >= PIECE_MIN
            ]
    except (OSError, tarfile.TarError, ValueError):
        return None
    spans: list[tuple[int, int]] = []
    at = 0
    for offset, length in members:
        if offset < at or offset + length > size:
            return None  # not laid out in order: store it whole
        if offset > at:
            spans.append((at, offset - at))
        spans.append((offset, length))
        at = offset + length
    if at < size:
        spans.append((at, size - at))
    return spans if len(spans) > 1 else None


def store_pieces(source: Path, spans: list[tuple[int, int]], blobs: Path) -> list[Piece]:
    """Store each span of `source` as a blob in the folder `blobs`, named by its sha256
    (durable; a piece already there, with its size, is only hashed, not written again);
    the pieces."""
    blobs.mkdir(parents=True, exist_ok=True)
    pieces: list[Piece] = []
    with source.open("rb") as reader:
        for offset, length in spans:
            reader.seek(offset)
            digest = _copy(reader, length, None)
            if _size(blobs / digest) != length:
                reader.seek(offset)
                _write_blob(reader, length, blobs, digest)
            pieces.append((digest, length))
    return pieces


def _copy(reader: IO[bytes], length: int, writer: IO[bytes] | None) -> str:
    """The sha256 of the next `length` bytes of `reader`, copied to `writer` too."""
    hasher, left = hashlib.sha256(), length
    while left:
        chunk = reader.read(min(_CHUNK, left))
        if not chunk:
            raise OSError(f"{reader.name} ended early")
        hasher.update(chunk)
        if writer is not None:
            writer.write(chunk)
        left -= len(chunk)
    return hasher.hexdigest()


def _write_blob(reader: IO[bytes], length: int, blobs: Path, digest: str) -> None:
    """Write the next `length` bytes of `reader` as the blob `digest`: a durable temporary
    renamed into place, if they still hash to `digest`."""
    fd, temp = tempfile.mkstemp(dir=blobs, prefix=f"{TEMP_PREFIX}piece.")
    try:
        with os.fdopen(fd, "wb") as writer:
            if _copy(reader, length, writer) != digest:
                raise OSError(f"{reader.name} changed while it was stored")
            writer.flush()
            os.fchmod(writer.fileno(), 0o644)
            os.fsync(writer.fileno())
        os.replace(temp, blobs / digest)
        temp = ""
    finally:
        if temp:
            with contextlib.suppress(OSError):
                os.unlink(temp)


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None
