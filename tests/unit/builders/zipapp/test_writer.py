"""The zip writer: zipfile's bytes, ZIP64 records included, however many threads deflate."""

from __future__ import annotations

import hashlib
import io
import random
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from shipyard.builders.zipapp import writer
from shipyard.builders.zipapp.writer import Entry, write_zip

STAMP = (2023, 11, 14, 22, 13, 21)
PREFIX = b"#!/usr/bin/env python3\n"


def _members() -> list[Entry]:
    noise = random.Random(7)
    return [
        Entry("__main__.py", b"print('hi')\n", 0o644),
        Entry("site/empty.txt", b"", 0o644),
        Entry("site/caf\u00e9/\u00fcber.py", "x = '\u00e9'\n".encode(), 0o644),  # not ASCII
        Entry("site/tool.so", noise.randbytes(700_000), 0o755),  # does not deflate
        Entry("site/big.py", b"value = 1\n" * 90_000, 0o644),  # deflates well
        *(Entry(f"site/pkg/m{i}.py", f"n = {i}\n".encode() * i, 0o644) for i in range(40)),
    ]


def _zipfile_bytes(members: Sequence[Entry], level: int | None) -> bytes:
    """What zipfile writes for the same entries: the writer's reference."""
    buffer = io.BytesIO()
    buffer.write(PREFIX)
    with zipfile.ZipFile(buffer, "w") as archive:
        for member in members:
            info = zipfile.ZipInfo(member.name, date_time=STAMP)
            info.create_system = 3
            info.external_attr = (0o100000 | member.mode) << 16
            info.compress_type = zipfile.ZIP_STORED if level is None else zipfile.ZIP_DEFLATED
            archive.writestr(info, member.data, compresslevel=level)
    return buffer.getvalue()


def _written(tmp_path: Path, members: Sequence[Entry], level: int | None, threads: int) -> bytes:
    path = tmp_path / f"out-{level}-{threads}.zip"
    with path.open("wb") as handle:
        digest = write_zip(handle, PREFIX, members, STAMP, level, threads)
    data = path.read_bytes()
    assert digest == hashlib.sha256(data).hexdigest()  # of the whole file, prefix too
    return data


@pytest.mark.parametrize("level", [4, 9, None])
@pytest.mark.parametrize("threads", [1, 2, 5])
def test_the_bytes_are_the_ones_zipfile_writes(
    tmp_path: Path, level: int | None, threads: int
) -> None:
    members = _members()
    assert _written(tmp_path, members, level, threads) == _zipfile_bytes(members, level)


def test_what_is_written_reads_back(tmp_path: Path) -> None:
    members = _members()
    data = _written(tmp_path, members, 4, 3)
    assert data.startswith(PREFIX + b"PK\x03\x04")
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.testzip() is None
        assert [i.filename for i in archive.infolist()] == [m.name for m in members]
        for member in members:
            assert archive.read(member.name) == member.data
            info = archive.getinfo(member.name)
            assert (info.external_attr >> 16) & 0o777 == member.mode
            assert info.date_time == (2023, 11, 14, 22, 13, 20)  # two-second resolution


def test_zip64_records_are_zipfiles_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The limits lowered on both sides, so a small archive needs every ZIP64 record:
    # members near or over the size limit, offsets past it, more members than allowed.
    monkeypatch.setattr(writer, "ZIP64_LIMIT", 400)
    monkeypatch.setattr(writer, "FILE_COUNT_LIMIT", 5)
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 400)
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 5)
    members = [
        Entry("a.txt", b"a" * 10, 0o644),
        Entry("b.txt", b"b" * 390, 0o644),  # within 5% of the limit: a ZIP64 local header
        Entry("c.bin", random.Random(1).randbytes(350), 0o644),  # past the limit's offset
        *(Entry(f"d{i}.txt", b"d" * i, 0o644) for i in range(5)),
    ]
    for level in (4, None):
        data = _written(tmp_path, members, level, 2)
        assert data == _zipfile_bytes(members, level)
        assert b"PK\x06\x06" in data and b"PK\x06\x07" in data  # the ZIP64 end records
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            assert [archive.read(m.name) for m in members] == [m.data for m in members]


def test_a_deflated_member_too_large_for_its_header_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # zipfile raises too: the header has no ZIP64 record, as the member is not within
    # 5% of the limit, and its bytes do not deflate (a stored block adds 5 bytes).
    monkeypatch.setattr(writer, "ZIP64_LIMIT", 50)
    noise = Entry("noise.bin", random.Random(3).randbytes(47), 0o644)
    with pytest.raises(ValueError, match="too large"), (tmp_path / "x.zip").open("wb") as handle:
        write_zip(handle, b"", [noise], STAMP, 9, 1)
