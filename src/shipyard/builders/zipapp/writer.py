"""The zip of an archive, its members deflated by several threads at once.

`zipfile` deflates each member in the thread that writes it, one after the other:
on mypy's site (42 MB, most of it compiled code) that was 0.6 s of a 1.7 s build
on one core while the others idled. Here the members are deflated by a pool (zlib
releases the GIL) and written in name order as each is ready. The bytes are the
ones `zipfile.ZipFile.writestr` writes for the same `ZipInfo`s (the tests compare
them), ZIP64 records included, so the choice of writer changes no archive.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO

__all__ = ["Entry", "write_zip"]

# zipfile's limits: a size or an offset above ZIP64_LIMIT, or more members than
# FILE_COUNT_LIMIT, takes a ZIP64 record (tests lower them to reach those records).
ZIP64_LIMIT = (1 << 31) - 1
FILE_COUNT_LIMIT = (1 << 16) - 1
_VERSION, _ZIP64_VERSION = 20, 45  # the zip versions a reader needs
_UNIX = 3  # the system that made the entries: unix, so readers honour the mode bits
_UTF8 = 0x800  # the flag of a name that is not ASCII
_STORED, _DEFLATED = 0, 8
# Entries are handed to the pool in batches of about this many bytes, so a site of
# many small files costs few hand-offs.
_BATCH = 1 << 20


@dataclass(frozen=True)
class Entry:
    """One file of an archive: its name inside, its bytes and its mode (0644 or 0755)."""

    name: str
    data: bytes
    mode: int = 0o644


@dataclass(frozen=True)
class _Packed:
    """A member as the zip stores it: its checksum, its bytes and how they are stored."""

    crc: int
    body: bytes
    method: int


def _packer(level: int | None) -> Callable[[bytes], _Packed]:
    def pack(data: bytes) -> _Packed:
        if level is None:
            return _Packed(zlib.crc32(data), data, _STORED)
        deflate = zlib.compressobj(level, zlib.DEFLATED, -15)
        body = deflate.compress(data) + deflate.flush()
        return _Packed(zlib.crc32(data), body, _DEFLATED)

    return pack


def _batches(members: Sequence[Entry]) -> list[list[int]]:
    """The indexes of `members` in batches of about _BATCH bytes, the largest first,
    so no thread is left with a big member at the end."""
    order = sorted(range(len(members)), key=lambda i: (-len(members[i].data), i))
    batches: list[list[int]] = []
    size = _BATCH
    for index in order:
        if size >= _BATCH:
            batches.append([])
            size = 0
        batches[-1].append(index)
        size += len(members[index].data)
    return batches


@contextmanager
def _packed(
    members: Sequence[Entry], level: int | None, threads: int
) -> Iterator[Callable[[int], _Packed]]:
    """The packed form of member `i`, by index: made by `threads` threads ahead of the
    writer, or as it asks for it with one."""
    pack = _packer(level)
    if threads <= 1:
        yield lambda index: pack(members[index].data)
        return

    def run(batch: list[int]) -> list[_Packed]:
        return [pack(members[index].data) for index in batch]

    with ThreadPoolExecutor(max_workers=threads) as pool:
        where: dict[int, tuple[Future[list[_Packed]], int]] = {}
        for batch in _batches(members):
            future = pool.submit(run, batch)
            where.update((index, (future, at)) for at, index in enumerate(batch))
        try:
            yield lambda index: where[index][0].result()[where[index][1]]
        finally:
            for future, _ in where.values():
                future.cancel()


def _dos_time(stamp: tuple[int, int, int, int, int, int]) -> tuple[int, int]:
    year, month, day, hour, minute, second = stamp
    return hour << 11 | minute << 5 | second // 2, (year - 1980) << 9 | month << 5 | day


def _name(member: Entry) -> tuple[bytes, int]:
    try:
        return member.name.encode("ascii"), 0
    except UnicodeEncodeError:
        return member.name.encode("utf-8"), _UTF8


class _Sink:
    """The archive file, with the sha256 of everything written to it."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.digest = hashlib.sha256()
        self.offset = 0

    def write(self, data: bytes) -> None:
        self.handle.write(data)
        self.digest.update(data)
        self.offset += len(data)


def _central(
    member: Entry, packed: _Packed, offset: int, local64: bool, when: tuple[int, int]
) -> bytes:
    """The central directory record of a member written at `offset`."""
    name, flags = _name(member)
    size, stored = len(member.data), len(packed.body)
    big = max(size, stored) > ZIP64_LIMIT
    wide = [size, stored] if big else []  # what does not fit goes to a ZIP64 record
    if offset > ZIP64_LIMIT:
        wide.append(offset)
    extra = struct.pack(f"<HH{len(wide)}Q", 1, 8 * len(wide), *wide) if wide else b""
    version = _ZIP64_VERSION if wide or local64 else _VERSION
    record = struct.pack(
        "<4s4B4HL2L5H2L",
        b"PK\x01\x02",
        *(version, _UNIX, version, 0, flags, packed.method, *when, packed.crc),
        *((0xFFFFFFFF, 0xFFFFFFFF) if big else (stored, size)),
        *(len(name), len(extra), 0, 0, 0, (0o100000 | member.mode) << 16),
        0xFFFFFFFF if offset > ZIP64_LIMIT else offset,
    )
    return record + name + extra


def _local(member: Entry, packed: _Packed, when: tuple[int, int]) -> tuple[bytes, bool]:
    """A member's local header, and whether it has a ZIP64 record (zipfile gives one
    to a member within 5% of the limit, before it knows the deflated size)."""
    name, flags = _name(member)
    size, stored = len(member.data), len(packed.body)
    local64 = size * 1.05 > ZIP64_LIMIT
    if not local64 and max(size, stored) > ZIP64_LIMIT:
        raise ValueError(f"{member.name}: {stored} bytes deflated is too large for a zip")
    extra = struct.pack("<HHQQ", 1, 16, size, stored) if local64 else b""
    header = struct.pack(
        "<4s2B4HL2L2H",
        b"PK\x03\x04",
        *(_ZIP64_VERSION if local64 else _VERSION, 0, flags, packed.method, *when, packed.crc),
        *((0xFFFFFFFF, 0xFFFFFFFF) if local64 else (stored, size)),
        *(len(name), len(extra)),
    )
    return header + name + extra, local64


def _end(sink: _Sink, count: int, start: int) -> None:
    """The end records of a central directory of `count` members written from `start`."""
    size = sink.offset - start
    if count > FILE_COUNT_LIMIT or start > ZIP64_LIMIT or size > ZIP64_LIMIT:
        at = sink.offset
        record = (b"PK\x06\x06", 44, _ZIP64_VERSION, _ZIP64_VERSION, 0, 0, count, count)
        sink.write(struct.pack("<4sQ2H2L4Q", *record, size, start))
        sink.write(struct.pack("<4sLQL", b"PK\x06\x07", 0, at, 1))
        count, size, start = min(count, 0xFFFF), min(size, 0xFFFFFFFF), min(start, 0xFFFFFFFF)
    sink.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, count, count, size, start, 0))


def write_zip(
    handle: BinaryIO,
    prefix: bytes,
    members: Sequence[Entry],
    stamp: tuple[int, int, int, int, int, int],
    level: int | None,
    threads: int = 1,
) -> str:
    """Write `prefix`, then `members` as a zip in their order, to the new file `handle`;
    the sha256 (hex) of all of it.

    Every member has the time `stamp` (year to second, from 1980) and is deflated at
    `level` (None: stored), by `threads` threads at once. Offsets count from the
    file's start, `prefix` included, as zipfile writes them after a shebang line.
    """
    sink = _Sink(handle)
    sink.write(prefix)
    when = _dos_time(stamp)
    directory: list[bytes] = []
    with _packed(members, level, threads) as packed_at:
        for index, member in enumerate(members):
            packed = packed_at(index)
            header, local64 = _local(member, packed, when)
            directory.append(_central(member, packed, sink.offset, local64, when))
            sink.write(header)
            sink.write(packed.body)
    start = sink.offset
    for record in directory:
        sink.write(record)
    _end(sink, len(members), start)
    return sink.digest.hexdigest()
