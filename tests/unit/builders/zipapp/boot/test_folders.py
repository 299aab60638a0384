"""The cache's private folders and their locks (`_boot.folders`): a temporary folder
is locked while in use and swept once abandoned, on Windows with its lock file."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from shipyard.builders.zipapp._boot import host
from shipyard.builders.zipapp._boot.cache import UNPACK_PREFIX
from shipyard.builders.zipapp._boot.folders import LOCK_SUFFIX, locked_temp, release, sweep


def test_a_temporary_folder_swept_before_it_is_locked_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: another start's sweep could remove a new unpack folder between
    mkdtemp and its lock, and the start failed ("cannot unpack native code ... No
    such file or directory", seen under load). The window is microseconds wide, so
    the sweep is made to land in it: the first folder vanishes as soon as it is made."""

    real = tempfile.mkdtemp
    made: list[str] = []

    def swept_at_once(*args: Any, **kwargs: Any) -> str:
        path = real(*args, **kwargs)
        made.append(path)
        if len(made) == 1:
            os.rmdir(path)  # what a concurrent _sweep does to an unlocked folder
        return str(path)

    monkeypatch.setattr(tempfile, "mkdtemp", swept_at_once)
    temp, fd = locked_temp(str(tmp_path), ".unpack-")
    try:
        assert len(made) == 2 and temp == made[1] and os.path.isdir(temp)
    finally:
        os.close(fd)


def test_a_stale_windows_temporary_folder_is_swept_with_its_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl
    import types

    msvcrt = types.ModuleType("msvcrt")
    msvcrt.LK_LOCK, msvcrt.LK_NBLCK = 1, 2  # type: ignore[attr-defined]

    def locking(fd: int, mode: int, nbytes: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | (fcntl.LOCK_NB if mode == 2 else 0))

    msvcrt.locking = locking  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "msvcrt", msvcrt)
    monkeypatch.setattr(host, "_os", lambda: "windows")
    live, fd = locked_temp(str(tmp_path), UNPACK_PREFIX)
    assert os.path.isfile(live + LOCK_SUFFIX)
    stale = tmp_path / f"{UNPACK_PREFIX}stale"
    (stale / "pkg").mkdir(parents=True)
    sweep(str(tmp_path), UNPACK_PREFIX)
    assert not stale.exists()
    assert not Path(str(stale) + LOCK_SUFFIX).exists()
    assert os.path.isdir(live)  # held: left alone, and so is its lock file
    assert os.path.isfile(live + LOCK_SUFFIX)
    release(live, fd)
    assert not os.path.exists(live + LOCK_SUFFIX)
    sweep(str(tmp_path), UNPACK_PREFIX)
    assert sorted(os.listdir(tmp_path)) == []
