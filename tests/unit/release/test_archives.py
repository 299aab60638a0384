"""Release archives per platform (issue 15, item 1): names, contents, reproducibility,
and an extracted Linux archive that runs here."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from shipyard.builders.zipapp import DEFAULT_SHEBANG, _boot, layout, write_archive
from shipyard.errors import ShipyardError
from shipyard.release.archives import (
    archive_name,
    find_license,
    members,
    readme,
    write_release_archive,
)

HERE = "{}.{}".format(*sys.version_info[:2])
SIX = (
    "linux/amd64",
    "linux/arm64",
    "darwin/amd64",
    "darwin/arm64",
    "windows/amd64",
    "windows/arm64",
)
EPOCH = 1_767_225_600  # 2026-01-01T00:00:00Z
PROGRAM = "import sys\ndef main():\n    print('hello from', sys.argv[0] != '')\n    return 4\n"


def _zipapp(folder: Path, platforms: tuple[str, ...] = SIX, binary: str = "app") -> Path:
    """A real zipapp of a tiny program, universal for `platforms` (or for the one given)."""
    site = folder / "site"
    (site / "app").mkdir(parents=True)
    (site / "app" / "__init__.py").write_text(PROGRAM)
    info = {
        "binary": binary,
        "version": "1.4.0",
        "python": HERE,
        "platform": "any" if len(platforms) > 1 else platforms[0],
        "platforms": list(platforms),
        "entrypoint": "app:main",
    }
    target = folder / "app-1.4.0.pyz"
    write_archive(target, DEFAULT_SHEBANG, layout(site, info), 0, compress=True)
    return target


def _license(folder: Path) -> Path:
    (folder / "LICENSE").write_text("Apache License 2.0\n")
    return folder / "LICENSE"


@pytest.mark.parametrize(
    ("platform", "name"),
    [
        ("linux/amd64", "app-1.4.0-linux-amd64.tar.gz"),
        ("linux/arm/v7", "app-1.4.0-linux-arm-v7.tar.gz"),
        ("darwin/arm64", "app-1.4.0-darwin-arm64.tar.gz"),
        ("windows/amd64", "app-1.4.0-windows-amd64.zip"),
        ("windows/arm64", "app-1.4.0-windows-arm64.zip"),
    ],
)
def test_archive_names(platform: str, name: str) -> None:
    assert archive_name("app", "1.4.0", platform) == name


def test_a_tar_gz_holds_the_program_license_and_readme_reproducibly(tmp_path: Path) -> None:
    pyz = _zipapp(tmp_path)
    path = write_release_archive(
        tmp_path / "out",
        zipapp=pyz,
        binary="app",
        version="1.4.0",
        platform="darwin/arm64",
        license_file=_license(tmp_path),
        epoch=EPOCH,
    )
    assert path == tmp_path / "out" / "app-1.4.0-darwin-arm64.tar.gz"
    assert sorted(os.listdir(tmp_path / "out")) == [path.name]  # no temporary left
    data = path.read_bytes()
    # gzip header: no file name (FLG 0), the build's time, OS byte 255.
    assert data[3] == 0 and int.from_bytes(data[4:8], "little") == EPOCH and data[9] == 255
    with tarfile.open(path) as tar:
        entries = tar.getmembers()
        top = "app-1.4.0-darwin-arm64"
        assert [(e.name, e.mode, e.type) for e in entries] == [
            (top, 0o755, tarfile.DIRTYPE),
            (f"{top}/LICENSE", 0o644, tarfile.REGTYPE),
            (f"{top}/README.txt", 0o644, tarfile.REGTYPE),
            (f"{top}/app", 0o755, tarfile.REGTYPE),
        ]
        assert {(e.mtime, e.uid, e.gid, e.uname, e.gname) for e in entries} == {
            (EPOCH, 0, 0, "", "")
        }
        program = tar.extractfile(f"{top}/app")
        text = tar.extractfile(f"{top}/README.txt")
        assert program is not None and text is not None
        assert program.read() == pyz.read_bytes()
        notes = text.read().decode()
    assert notes == readme("app", "1.4.0", "darwin/arm64", HERE)
    assert f"needs Python {HERE}" in notes and "~/Library/Caches/shipyard/zipapps" in notes

    # The same inputs, touched and copied elsewhere under another umask: the same bytes.
    again = tmp_path / "again"
    again.mkdir()
    copy = again / pyz.name
    copy.write_bytes(pyz.read_bytes())
    os.utime(copy, (1, 1))
    old = os.umask(0o077)
    try:
        second = write_release_archive(
            again / "out",
            zipapp=copy,
            binary="app",
            version="1.4.0",
            platform="darwin/arm64",
            license_file=_license(again),
            epoch=EPOCH,
        )
    finally:
        os.umask(old)
    assert second.read_bytes() == data


def test_a_windows_zip_holds_the_zipapp_and_its_launcher(tmp_path: Path) -> None:
    pyz = _zipapp(tmp_path)
    path = write_release_archive(
        tmp_path,
        zipapp=pyz,
        binary="app",
        version="1.4.0",
        platform="windows/amd64",
        license_file=None,
        epoch=EPOCH,
    )
    assert path.name == "app-1.4.0-windows-amd64.zip"
    top = "app-1.4.0-windows-amd64"
    with zipfile.ZipFile(path) as archive:
        assert archive.namelist() == [
            f"{top}/",
            f"{top}/README.txt",
            f"{top}/app.cmd",
            f"{top}/app.pyz",
        ]
        assert {i.date_time for i in archive.infolist()} == {(2026, 1, 1, 0, 0, 0)}
        assert archive.read(f"{top}/app.pyz") == pyz.read_bytes()
        assert archive.read(f"{top}/app.cmd") == f'@py -{HERE} "%~dp0app.pyz" %*\r\n'.encode()
        notes = archive.read(f"{top}/README.txt").decode()
    assert "\r\n" in notes and "\n" not in notes.replace("\r\n", "")
    assert r"%LOCALAPPDATA%\shipyard\zipapps" in notes and "app.cmd" in notes
    again = write_release_archive(
        tmp_path / "again",
        zipapp=pyz,
        binary="app",
        version="1.4.0",
        platform="windows/amd64",
        license_file=None,
        epoch=EPOCH,
    )
    assert again.read_bytes() == path.read_bytes()


def test_a_zipapp_for_other_platforms_or_another_binary_is_refused(tmp_path: Path) -> None:
    pyz = _zipapp(tmp_path, ("linux/amd64",))
    with pytest.raises(ShipyardError, match=r"built for linux/amd64, not windows/amd64"):
        members(pyz, "app", "1.4.0", "windows/amd64", None)
    with pytest.raises(ShipyardError, match=r"is not a zipapp of other"):
        members(pyz, "other", "1.4.0", "linux/amd64", None)
    (tmp_path / "junk.pyz").write_bytes(b"not a zip")
    with pytest.raises(ShipyardError, match=r"is not a shipyard zipapp"):
        members(tmp_path / "junk.pyz", "app", "1.4.0", "linux/amd64", None)
    with pytest.raises(ShipyardError, match=r"not a platform"):
        archive_name("app", "1", "linux")


def test_a_license_named_like_the_program_is_refused(tmp_path: Path) -> None:
    pyz = _zipapp(tmp_path, binary="README.txt")
    with pytest.raises(ShipyardError, match=r"taken"):
        members(pyz, "README.txt", "1.4.0", "linux/amd64", _license(tmp_path))


def test_find_license_looks_for_the_usual_names(tmp_path: Path) -> None:
    assert find_license(tmp_path) is None
    (tmp_path / "COPYING").write_text("GPL\n")
    assert find_license(tmp_path) == tmp_path / "COPYING"
    (tmp_path / "LICENSE.txt").write_text("MIT\n")
    assert find_license(tmp_path) == tmp_path / "LICENSE.txt"


def test_the_extracted_linux_archive_runs_by_its_shebang(tmp_path: Path) -> None:
    pyz = _zipapp(tmp_path)
    path = write_release_archive(
        tmp_path / "out",
        zipapp=pyz,
        binary="app",
        version="1.4.0",
        platform="linux/amd64",
        license_file=None,
        epoch=EPOCH,
    )
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(path.read_bytes()))) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    program = tmp_path / "x" / "app-1.4.0-linux-amd64" / "app"
    assert program.stat().st_mode & 0o777 == 0o755
    # `/usr/bin/env python3` finds this interpreter first on PATH.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        _boot.ROOT_ENV: str(tmp_path / "cache"),
    }
    done = subprocess.run(
        [str(program)], env=env, capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 4, done.stderr
    assert done.stdout == "hello from True\n"
