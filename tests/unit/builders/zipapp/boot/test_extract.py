"""A zipapp's first start refuses names that escape on Windows and a site that does not
fit on the disk (`shipyard.builders.zipapp._boot.extract`).

Regressions (security review, item 3):
(a) member names were split on "/" only, so `site/..\\x` or `site/C:\\x`, plain names on
    Linux, would land outside the cache folder on Windows (a zipapp shipyard builds never
    holds a backslash or a ':'; the builder refuses backslash names);
(b) the site was unpacked whatever the room left: an archive declaring gigabytes of zeros
    (they compress 1000:1) filled the disk before failing.
"""

from __future__ import annotations

import os
import shutil
import sys
import zipfile
from collections import namedtuple
from pathlib import Path

import pytest

from shipyard.builders.zipapp import _boot as boot
from shipyard.builders.zipapp._boot.extract import extract
from tests.reliability import record
from tests.unit._hostile import PAYLOAD, write_zip
from tests.unit.builders.zipapp.boot.test_boot import make_pyz, run

APP = "def main():\n    print('ok')\n"
UNSAFE = [
    "site/..\\evil",
    "site/app/..\\..\\..\\evil",
    "site/C:\\evil",
    "site/C:evil",
    "site/app/c:\\Windows\\evil",
    "site/app/x\\y",
    "site/\\\\server\\share\\evil",
    "site/app/stream:evil",
]


@pytest.mark.reliability
def test_names_with_a_backslash_or_a_colon_are_refused(tmp_path: Path) -> None:
    """Bug: `site/..\\x` and `site/C:\\x` were unpacked (as odd file names on Linux, outside
    the cache folder on Windows)."""
    problems = []
    for number, name in enumerate(UNSAFE):
        case = tmp_path / str(number)
        pyz = make_pyz(case, {"app/__init__.py": APP})
        write_zip(pyz, "a", [(name, PAYLOAD, 0o100644)])
        target = case / "unpacked"
        target.mkdir()
        try:
            extract(str(pyz), str(target))
        except boot.BootError as exc:
            if "the archive is damaged: it holds an unsafe name" not in str(exc):
                problems.append(f"{name!r}: {exc}")
        else:
            problems.append(f"{name!r} was unpacked: {sorted(os.listdir(target))}")
        if any(target.iterdir()):
            problems.append(f"{name!r}: files were written before the refusal")
    assert not problems, "\n".join(problems)
    # End to end: one line, exit 2, nothing unpacked.
    pyz = make_pyz(tmp_path / "run", {"app/__init__.py": APP})
    write_zip(pyz, "a", [("site/..\\evil", PAYLOAD, 0o100644)])
    done = run(pyz, tmp_path / "run" / "cache")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "unsafe name" in lines[0]
    record(
        "Windows-only escapes in a zipapp's names",
        area="hostile documents",
        cases=len(UNSAFE) + 1,
        injected=f"{len(UNSAFE)} members named with a backslash or a ':' (..\\, C:\\, C:, "
        "UNC, an NTFS stream), each unpacked; one archive run end to end",
        result=f"{len(UNSAFE)}/{len(UNSAFE)} refused as a damaged archive before any file was "
        "written; the run exits 2 with one line",
        figures={"cases": len(UNSAFE) + 1, "refused": len(UNSAFE)},
    )


def test_the_builder_refuses_a_colon_the_bootstrap_would_refuse(tmp_path: Path) -> None:
    """Bug (with the bootstrap's new rule): a site file named with a ':' was packed into a
    zipapp whose every first start would then fail as damaged."""
    from shipyard.builders.zipapp.archive import _site_files
    from shipyard.errors import ShipyardError

    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text(APP)
    assert list(_site_files(tmp_path)) == ["app/__init__.py"]
    (tmp_path / "app" / "C:evil").write_text("x")
    with pytest.raises(ShipyardError, match="a ':' in a name"):
        _site_files(tmp_path)


Usage = namedtuple("Usage", "total used free")
MiB = 1 << 20


def _big_pyz(folder: Path, size: int) -> Path:
    """An archive whose site holds `size` bytes of zeros (a few KB compressed)."""
    pyz = make_pyz(folder, {"app/__init__.py": APP})
    info = zipfile.ZipInfo("site/app/zeros.bin", date_time=(2023, 11, 14, 22, 13, 20))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o100644 << 16
    with zipfile.ZipFile(pyz, "a") as archive, archive.open(info, "w") as out:
        for _ in range(size // MiB):
            out.write(bytes(MiB))
    return pyz


@pytest.mark.reliability
def test_a_site_larger_than_the_free_space_is_refused_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug: no look at the free space; the unpacking wrote until the disk was full."""
    pyz = _big_pyz(tmp_path, 64 * MiB)
    asked: list[str] = []

    def small_disk(path: str | os.PathLike[str]) -> Usage:
        asked.append(os.fspath(path))
        return Usage(100 * MiB, 90 * MiB, 10 * MiB)

    monkeypatch.setattr(shutil, "disk_usage", small_disk)
    target = tmp_path / "unpacked"
    target.mkdir()
    with pytest.raises(boot.BootError) as caught:
        extract(str(pyz), str(target))
    message = str(caught.value)
    assert asked == [str(target)]
    assert "not enough disk space" in message
    assert f"{10 * MiB} bytes free" in message, message
    needed = int(message.split(" needs ")[1].split(" bytes", maxsplit=1)[0])
    assert needed >= 64 * MiB, message
    assert boot.ROOT_ENV in message
    assert not any(target.iterdir())
    # With room enough, the same archive unpacks.
    monkeypatch.setattr(shutil, "disk_usage", lambda _: Usage(10**12, 0, 10**12))
    extract(str(pyz), str(target))
    assert (target / "app" / "zeros.bin").stat().st_size == 64 * MiB
    # A file system that cannot say how full it is: unpacked, as before.
    other = tmp_path / "other"
    other.mkdir()

    def unknown(_: object) -> Usage:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(shutil, "disk_usage", unknown)
    extract(str(pyz), str(other))
    assert (other / "app" / "zeros.bin").is_file()
    record(
        "a zipapp site larger than the free space",
        area="resource bounds",
        cases=3,
        injected="a 64 MiB site (a few KB compressed) unpacked where the file system reports "
        "10 MiB free, then 1 TB free, then no answer",
        result="refused before any file was written, naming the bytes needed and free; "
        "unpacked when it fits or when the free space is unknown",
        figures={"site_mib": 64, "free_mib": 10, "needed_bytes": needed},
    )


SMALL_DISK = """\
import collections, shutil
_Usage = collections.namedtuple("usage", "total used free")
shutil.disk_usage = lambda path: _Usage(100 << 20, 99 << 20, 1 << 20)
"""


@pytest.mark.skipif(bool(sys.flags.no_site), reason="needs sitecustomize")
def test_a_full_disk_at_first_start_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug: the start wrote until the disk was full, then failed on ENOSPC."""
    pyz = _big_pyz(tmp_path, 8 * MiB)
    patch = tmp_path / "patch"
    patch.mkdir()
    (patch / "sitecustomize.py").write_text(SMALL_DISK)
    theirs = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(patch), *([theirs] if theirs else [])]))
    root = tmp_path / "cache"
    done = run(pyz, root)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "not enough disk space" in lines[0] and f"{1 << 20} bytes free" in lines[0]
    assert not list(root.rglob("zeros.bin")) if root.exists() else True
