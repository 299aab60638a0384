"""A zipapp's first start streams its members to disk (issue: security, item 10).

The bootstrap used to read each member whole before writing it: a 2 GiB member of
zeros in a 2 MB archive took 4.2 GB of memory at first start. These tests append such
a member to an archive laid out as the builder lays zipapps out, start it in a child
process and measure the child's peak memory; and they check that streaming did not
loosen the CRC check: a member whose bytes fail it leaves nothing unpacked.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import pytest

from shipyard.builders.zipapp import _boot as boot
from tests.reliability import record
from tests.unit.builders.zipapp.boot.test_boot import build_id, make_pyz, run

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="measures memory with wait4")

MiB = 1 << 20
# Zeros compress about 1000:1: the member is 512 MiB, the archive about half a MB.
BIG = 512 * MiB
# Far below the member's size, far above what Python and the bootstrap need.
PEAK_LIMIT = 200 * MiB
APP = """\
import os
def main():
    print(os.path.getsize(os.path.join(os.path.dirname(__file__), "zeros.bin")))
"""


def _append_zeros(pyz: Path, name: str, size: int) -> None:
    """Append `name`, `size` zero bytes deflated, written in chunks (this process never
    holds the member whole)."""
    info = zipfile.ZipInfo(name, date_time=(2023, 11, 14, 22, 13, 20))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o100644 << 16
    chunk = bytes(MiB)
    with zipfile.ZipFile(pyz, "a") as archive, archive.open(info, "w") as out:
        for _ in range(size // MiB):
            out.write(chunk)


# Runs in a small Python of its own, which starts the zipapp and prints its exit status
# and peak memory. A child spawned straight from the test process would not do: Linux
# keeps the high-water mark of the memory a process had before its exec, and a child
# spawned with posix_spawn (vfork) shares the parent's, so the child of a pytest process
# that has grown to 200 MiB "peaks" at 200 MiB whatever it does.
_MEASURE = """
import os, sys
pyz, log = sys.argv[1], sys.argv[2]
fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
pid = os.posix_spawn(
    sys.executable,
    [sys.executable, pyz],
    os.environ,
    file_actions=[(os.POSIX_SPAWN_DUP2, fd, 1), (os.POSIX_SPAWN_DUP2, fd, 2)],
)
os.close(fd)
_, status, usage = os.wait4(pid, 0)
# ru_maxrss is in KiB on Linux, in bytes on macOS.
peak = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
print(os.waitstatus_to_exitcode(status), peak)
"""


def _start_measured(pyz: Path, root: Path, log: Path) -> tuple[int, int]:
    """Start `pyz` with `root` as its cache folder, output to `log`; its exit status and
    peak resident memory in bytes (of that child alone, from wait4)."""
    env = {**os.environ, boot.ROOT_ENV: str(root)}
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(pyz), str(log)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    status, peak = done.stdout.split()
    return int(status), int(peak)


@pytest.mark.reliability
def test_a_huge_member_is_unpacked_with_bounded_memory(tmp_path: Path) -> None:
    """Regression: `_extract` read each member whole (`source.read(info)`), so the first
    start of an archive with a 512 MiB member of zeros peaked above 512 MiB of memory."""
    pyz = make_pyz(tmp_path, {"app/__init__.py": APP})
    _append_zeros(pyz, "site/app/zeros.bin", BIG)
    assert pyz.stat().st_size < 4 * MiB  # a small download...
    root = tmp_path / "cache"
    log = tmp_path / "start.log"
    status, peak = _start_measured(pyz, root, log)
    output = log.read_text()
    assert status == 0, output
    assert output == f"{BIG}\n"  # ...that unpacked whole
    zeros = root / build_id(pyz) / "site" / "app" / "zeros.bin"
    assert zeros.stat().st_size == BIG
    assert zeros.stat().st_mode & 0o777 == 0o644
    assert peak < PEAK_LIMIT, f"the first start peaked at {peak // MiB} MiB"
    record(
        f"a {BIG // MiB} MiB member in a {pyz.stat().st_size // 1024} KiB zipapp",
        area="resource bounds",
        cases=1,
        injected=f"a zipapp with one member of {BIG // MiB} MiB of zeros, started cold",
        result=f"unpacked whole with a peak of {peak // MiB} MiB resident (limit "
        f"{PEAK_LIMIT // MiB} MiB; before the fix: above the member's size)",
        figures={"peak_mb": peak // MiB, "member_mb": BIG // MiB},
    )


def _corrupt_crc(pyz: Path, name: str) -> None:
    """Change the CRC the archive records for `name` (local header and central
    directory), leaving its bytes as they are: they no longer match it."""
    with zipfile.ZipFile(pyz) as archive:
        crc = archive.getinfo(name).CRC
    data = pyz.read_bytes()
    old, new = struct.pack("<I", crc), struct.pack("<I", crc ^ 0xFFFFFFFF)
    assert data.count(old) == 2, "the CRC should be in the local header and the directory"
    pyz.write_bytes(data.replace(old, new))


def test_a_member_failing_its_crc_leaves_nothing_unpacked(tmp_path: Path) -> None:
    """Streaming writes a member's first chunks before its CRC can be checked (at the
    end of the stream): the damaged archive must still be refused and the partial
    files must not stay, in the cache or in a temporary folder."""
    pyz = make_pyz(tmp_path, {"app/__init__.py": APP})
    name = "site/app/zeros.bin"
    # Several chunks, not zeros (whose CRC could recur elsewhere in the archive).
    payload = b"".join(
        zlib.crc32(n.to_bytes(4, "little")).to_bytes(4, "little") for n in range(1 << 20)
    )
    with zipfile.ZipFile(pyz, "a", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(zipfile.ZipInfo(name, date_time=(2023, 11, 14, 22, 13, 20)), payload)
    _corrupt_crc(pyz, name)
    root = tmp_path / "cache"
    done = run(pyz, root)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("app: the archive is damaged: "), done.stderr
    assert "CRC" in done.stderr
    assert "Traceback" not in done.stderr
    home = root / build_id(pyz)
    assert not (home / "site").exists()  # nothing published
    assert sorted(p.name for p in home.iterdir()) == ["use"]  # no temporary folder left


@pytest.mark.parametrize("damage", ["garbage", "cut short"])
def test_a_member_that_does_not_inflate_is_a_damaged_archive(tmp_path: Path, damage: str) -> None:
    """Regression (review of the streaming fix): compressed bytes that are not a deflate
    stream raised zlib.error, and a stream cut short EOFError, each a traceback instead
    of the one-line "damaged archive" and exit 2."""
    pyz = make_pyz(tmp_path, {"app/__init__.py": APP})
    name = "site/app/zeros.bin"
    payload = b"".join(n.to_bytes(4, "little") for n in range(1 << 16))
    member = zipfile.ZipInfo(name, date_time=(2023, 11, 14, 22, 13, 20))
    member.compress_type = zipfile.ZIP_DEFLATED  # a ZipInfo is stored unless told
    with zipfile.ZipFile(pyz, "a") as archive:
        archive.writestr(member, payload)
    with zipfile.ZipFile(pyz) as archive:
        info = archive.getinfo(name)
    assert info.compress_size < len(payload)
    data = bytearray(pyz.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    if damage == "garbage":  # a reserved block type (0b11) at the first bits
        data[start] = 0xFF
    else:  # the directory and local header say fewer compressed bytes than there are
        old = struct.pack("<I", info.compress_size)
        new = struct.pack("<I", info.compress_size // 2)
        assert data.count(old) >= 2
        data = bytearray(bytes(data).replace(old, new))
    pyz.write_bytes(bytes(data))
    done = run(pyz, tmp_path / "cache")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("app: the archive is damaged: "), done.stderr
    assert "Traceback" not in done.stderr
