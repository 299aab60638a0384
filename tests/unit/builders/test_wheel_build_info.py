"""Build info in every output: the wheel's .dist-info file (zipapps: see zipapp/test_zipapp.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path

from shipyard.builders.wheel import BUILD_INFO, build_info, normalize_wheel
from shipyard.stamp import Stamp
from tests.unit.builders.test_resolve import make_wheel

EPOCH = 1_700_000_000


def test_wheels_carry_the_build_info_in_their_dist_info_and_record(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", "app", "1.0", files={"app/__init__.py": ""})
    info = build_info(Stamp("1.0", "abcdef0", False, EPOCH))
    normalize_wheel(wheel, tmp_path / "a.whl", EPOCH, info)
    normalize_wheel(wheel, tmp_path / "b.whl", EPOCH, info)
    assert (tmp_path / "a.whl").read_bytes() == (tmp_path / "b.whl").read_bytes()
    with zipfile.ZipFile(tmp_path / "a.whl") as archive:
        names = archive.namelist()
        data = archive.read(f"app-1.0.dist-info/{BUILD_INFO}")
        record = archive.read("app-1.0.dist-info/RECORD").decode().splitlines()
    assert names[-1] == "app-1.0.dist-info/RECORD"
    assert json.loads(data) == {
        "version": "1.0",
        "revision": "abcdef0",
        "dirty": False,
        "created": "2023-11-14T22:13:20Z",
    }
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert record[-2:] == [
        f"app-1.0.dist-info/{BUILD_INFO},sha256={digest},{len(data)}",
        "app-1.0.dist-info/RECORD,,",
    ]
    # Stamping a stamped wheel replaces the file and its line, never duplicates them.
    normalize_wheel(tmp_path / "a.whl", tmp_path / "c.whl", EPOCH, {**info, "dirty": True})
    with zipfile.ZipFile(tmp_path / "c.whl") as archive:
        lines = archive.read("app-1.0.dist-info/RECORD").decode().splitlines()
        assert json.loads(archive.read(f"app-1.0.dist-info/{BUILD_INFO}"))["dirty"] is True
    assert sum(BUILD_INFO in line for line in lines) == 1
