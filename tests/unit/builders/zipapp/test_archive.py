"""Zipapp archives: the deterministic writer and the layout."""

from __future__ import annotations

import json
import marshal
import sys
import zipfile
from importlib.util import MAGIC_NUMBER, source_hash
from pathlib import Path

from shipyard.builders.zipapp._boot.layout import BOOT_DATA, BUILD_INFO, PARTS, SOURCE
from shipyard.builders.zipapp.archive import (
    DEFAULT_SHEBANG,
    Entry,
    layout,
    write_archive,
)

ENTRIES = [
    Entry("site/pkg/__init__.py", b"x = 1\n"),
    Entry("site/pkg/tool.so", b"\x7fELF", 0o755),
    Entry("__main__.py", b"print('hi')\n"),
    Entry("site/mod.py", b"y = 2\n"),
]
EPOCH = 1_700_000_000


def test_the_archive_is_a_shebang_then_a_sorted_zip_with_one_time_and_normal_modes(
    tmp_path: Path,
) -> None:
    write_archive(tmp_path / "a.pyz", "#!/usr/bin/python3.11", ENTRIES, EPOCH, compress=True)
    assert (tmp_path / "a.pyz").read_bytes().startswith(b"#!/usr/bin/python3.11\nPK")
    with zipfile.ZipFile(tmp_path / "a.pyz") as archive:
        assert archive.testzip() is None
        infos = archive.infolist()
        names = [i.filename for i in infos]
        assert names == sorted(names)
        # No folder entries: the bootstrap makes the folders of what it unpacks.
        assert names == ["__main__.py", "site/mod.py", "site/pkg/__init__.py", "site/pkg/tool.so"]
        assert {i.date_time for i in infos} == {(2023, 11, 14, 22, 13, 20)}
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in infos}
        assert modes == {
            "__main__.py": 0o644,
            "site/mod.py": 0o644,
            "site/pkg/__init__.py": 0o644,
            "site/pkg/tool.so": 0o755,
        }
        assert {i.compress_type for i in infos} == {zipfile.ZIP_DEFLATED}
        assert archive.read("site/pkg/tool.so") == b"\x7fELF"


def test_the_bytes_depend_only_on_the_entries_not_their_order(tmp_path: Path) -> None:
    write_archive(tmp_path / "a.pyz", DEFAULT_SHEBANG, ENTRIES, EPOCH, compress=True)
    write_archive(tmp_path / "b.pyz", DEFAULT_SHEBANG, ENTRIES[::-1], EPOCH, compress=True)
    assert (tmp_path / "a.pyz").read_bytes() == (tmp_path / "b.pyz").read_bytes()
    write_archive(tmp_path / "c.pyz", DEFAULT_SHEBANG, ENTRIES, EPOCH + 2, compress=True)
    assert (tmp_path / "a.pyz").read_bytes() != (tmp_path / "c.pyz").read_bytes()


def test_uncompressed_archives_and_clocks_before_1980(tmp_path: Path) -> None:
    write_archive(tmp_path / "a.pyz", "/usr/bin/env python3", ENTRIES, 0, compress=False)
    assert (tmp_path / "a.pyz").read_bytes().startswith(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(tmp_path / "a.pyz") as archive:
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_STORED}
        assert archive.infolist()[0].date_time == (1980, 1, 1, 0, 0, 0)


def _site(root: Path) -> Path:
    files = {
        "app/__init__.py": "def main():\n    return 0\n",
        "app/util.py": "",
        "app/data.txt": "",
        "app/__pycache__/util.cpython-311.pyc": "",
        "fast/__init__.py": "",
        "fast/_c.cpython-311-x86_64-linux-gnu.so": "",
        "fast.libs/libz-1a2b.so.1.2.13": "",
        "single.py": "",
        "bin/app": "#!/somewhere/python\n",
        "app-1.0.dist-info/METADATA": "Name: app\n",
        "not-a-module/x.py": "",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _boot_data(entries: list[Entry]) -> dict[str, object]:
    data = next(e.data for e in entries if e.name == BOOT_DATA)
    loaded = marshal.loads(data)
    assert isinstance(loaded, dict)
    return loaded


def test_layout_ships_the_site_the_bootstrap_and_the_build_info(tmp_path: Path) -> None:
    entries = layout(_site(tmp_path / "site"), {"binary": "app"})
    names = {e.name for e in entries}
    boot = {SOURCE % part for part in PARTS}  # every module of the bootstrap
    assert {"__main__.py", *boot, BUILD_INFO, BOOT_DATA} <= names
    site = {n.removeprefix("site/") for n in names if n.startswith("site/")}
    assert site == {
        "app/__init__.py",
        "app/util.py",
        "app/data.txt",
        "fast/__init__.py",
        "fast/_c.cpython-311-x86_64-linux-gnu.so",
        "fast.libs/libz-1a2b.so.1.2.13",
        "single.py",
        "app-1.0.dist-info/METADATA",
        "not-a-module/x.py",
    }  # no stale __pycache__, no scripts with the installer's shebang
    info = json.loads(next(e.data for e in entries if e.name == BUILD_INFO))
    assert info == _boot_data(entries)  # what the bootstrap reads is what users read
    assert set(info) == {"binary", "native", "compiled", "build_id"}
    assert (info["native"], info["compiled"]) == (True, False)
    assert next(e for e in entries if e.name.endswith(".so")).mode == 0o755


def test_the_build_id_follows_the_content_not_the_build_info(tmp_path: Path) -> None:
    site = _site(tmp_path / "site")

    def build_id(info: dict[str, object]) -> object:
        return _boot_data(layout(site, info))["build_id"]

    first = build_id({"version": "1"})
    assert build_id({"version": "2"}) == first
    (site / "app" / "util.py").write_text("changed = True\n")
    assert build_id({"version": "1"}) != first


def test_compiled_layouts_put_pyc_files_where_python_looks(tmp_path: Path) -> None:
    site = _site(tmp_path / "site")
    entries = layout(site, {}, compile_pyc=True)
    tag = sys.implementation.cache_tag
    pyc = {e.name for e in entries if e.name.endswith(".pyc")}
    assert pyc == {
        f"site/app/__pycache__/__init__.{tag}.pyc",
        f"site/app/__pycache__/util.{tag}.pyc",
        f"site/__pycache__/single.{tag}.pyc",
        f"site/fast/__pycache__/__init__.{tag}.pyc",
    }
    assert layout(site, {}, compile_pyc=True) == entries  # deterministic
    header = next(e.data for e in entries if e.name.endswith(f"util.{tag}.pyc"))[:16]
    # Unchecked hash-based (PEP 552 flags 0b01): trusted without reading the source.
    assert header[:4] == MAGIC_NUMBER and int.from_bytes(header[4:8], "little") == 1
    assert header[8:] == source_hash(b"")
