"""Wheel normalisation: any backend's wheel becomes byte-for-byte reproducible."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

from shipyard.builders.wheel import normalize_wheel

ENTRIES = {
    "demo/__init__.py": b"x = 1\n",
    "demo/tool.sh": b"#!/bin/sh\n",
    "demo-1.0.dist-info/METADATA": b"Name: demo\n",
    "demo-1.0.dist-info/RECORD": b"",
    "demo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\n",
}


def _messy_wheel(path: Path, order: list[str], when: tuple[int, int, int, int, int, int]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name in order:
            info = zipfile.ZipInfo(name, date_time=when)
            info.external_attr = (0o100775 if name.endswith(".sh") else 0o100600) << 16
            archive.writestr(info, ENTRIES[name], compress_type=zipfile.ZIP_STORED)


def test_two_differently_made_wheels_normalise_to_the_same_bytes(tmp_path: Path) -> None:
    names = sorted(ENTRIES)
    _messy_wheel(tmp_path / "a.whl", names, (2020, 1, 1, 0, 0, 0))
    _messy_wheel(tmp_path / "b.whl", list(reversed(names)), (2023, 5, 6, 7, 8, 10))
    normalize_wheel(tmp_path / "a.whl", tmp_path / "a-n.whl", 1_700_000_000)
    normalize_wheel(tmp_path / "b.whl", tmp_path / "b-n.whl", 1_700_000_000)
    first = (tmp_path / "a-n.whl").read_bytes()
    assert first == (tmp_path / "b-n.whl").read_bytes()
    assert (
        hashlib.sha256(first).hexdigest()
        != hashlib.sha256((tmp_path / "a.whl").read_bytes()).hexdigest()
    )


def test_order_times_and_modes(tmp_path: Path) -> None:
    _messy_wheel(tmp_path / "a.whl", sorted(ENTRIES, reverse=True), (2020, 1, 1, 0, 0, 0))
    normalize_wheel(tmp_path / "a.whl", tmp_path / "n.whl", 1_700_000_000)
    with zipfile.ZipFile(tmp_path / "n.whl") as archive:
        infos = archive.infolist()
        names = [i.filename for i in infos]
        assert names[-1] == "demo-1.0.dist-info/RECORD"
        assert names[:2] == ["demo/__init__.py", "demo/tool.sh"]
        assert {i.date_time for i in infos} == {(2023, 11, 14, 22, 13, 20)}
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in infos}
        assert modes["demo/tool.sh"] == 0o755
        assert modes["demo/__init__.py"] == 0o644
        assert all(archive.read(n) == ENTRIES[n] for n in names)


def test_clock_before_1980_is_clamped(tmp_path: Path) -> None:
    _messy_wheel(tmp_path / "a.whl", sorted(ENTRIES), (2020, 1, 1, 0, 0, 0))
    normalize_wheel(tmp_path / "a.whl", tmp_path / "n.whl", 0)
    with zipfile.ZipFile(tmp_path / "n.whl") as archive:
        assert archive.infolist()[0].date_time == (1980, 1, 1, 0, 0, 0)
