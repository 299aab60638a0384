"""Where the cache is, and the trust rule folder by folder (`_boot.trust`).

Regression tests for issue 12, item 1 (the cache runs code, so it is used only when no
one else could have written it); the bootstrap's use of the rule is in
test_cache_security.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shipyard.builders.zipapp import _boot as boot
from shipyard.builders.zipapp._boot import host
from shipyard.builders.zipapp._boot.host import user_id

AS_ROOT = os.geteuid() == 0
NOBODY = 65534
only_root = pytest.mark.skipif(not AS_ROOT, reason="chown to another user needs root")


def test_cache_root_prefers_the_variable_then_xdg_then_home() -> None:
    assert boot.cache_root({boot.ROOT_ENV: "/srv/z", "XDG_CACHE_HOME": "/x"}) == "/srv/z"
    assert boot.cache_root({"XDG_CACHE_HOME": "/x"}) == "/x/shipyard/zipapps"
    home = os.path.expanduser("~")
    assert boot.cache_root({}) == os.path.join(home, ".cache", "shipyard", "zipapps")


@pytest.mark.parametrize(
    ("system", "expected"),
    [
        ("linux", os.path.join("/x", "shipyard", "zipapps")),  # XDG_CACHE_HOME
        ("darwin", os.path.join("/home/u", "Library", "Caches", "shipyard", "zipapps")),
        ("windows", os.path.join("C:/Users/u/AppData/Local", "shipyard", "zipapps")),
    ],
)
def test_the_cache_folder_is_this_os_users_cache_folder(
    monkeypatch: pytest.MonkeyPatch, system: str, expected: str
) -> None:
    monkeypatch.setattr(host, "_os", lambda: system)
    monkeypatch.setenv("HOME", "/home/u")
    environ = {"XDG_CACHE_HOME": "/x", "LOCALAPPDATA": "C:/Users/u/AppData/Local"}
    assert boot.cache_root(environ) == expected
    # $SHIPYARD_ZIPAPP_ROOT wins everywhere.
    assert boot.cache_root({**environ, boot.ROOT_ENV: "/srv/z"}) == "/srv/z"


def test_the_cache_folder_defaults_without_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/u")
    monkeypatch.setattr(host, "_os", lambda: "windows")
    assert boot.cache_root({}) == os.path.join("/home/u", "AppData", "Local", "shipyard", "zipapps")
    monkeypatch.setattr(host, "_os", lambda: "darwin")  # macOS has no XDG folders
    assert boot.cache_root({"XDG_CACHE_HOME": "/x"}).startswith("/home/u/Library/Caches/")


def test_ownership_and_modes_are_checked_only_where_posix_has_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    (root / "id").mkdir(parents=True)
    (root / "id").chmod(0o777)
    site = str(root / "id" / "site")
    monkeypatch.setattr(host, "_os", lambda: "darwin")
    assert (
        boot.untrusted(str(root), site)
        == f"{root / 'id'} is writable by group and others (mode 777)"
    )
    monkeypatch.setattr(host, "_os", lambda: "windows")
    assert user_id() is None
    assert boot.untrusted(str(root), site) is None  # no POSIX modes: nothing to judge


def test_a_private_root_under_a_sticky_tmp_is_trusted(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    assert boot.untrusted(str(root), str(root / "id" / "site")) is None  # missing: made private
    assert boot.untrusted("/tmp", "/tmp") is not None  # /tmp itself is no cache root


@pytest.mark.parametrize(
    ("mode", "who"),
    [
        (0o770, "group"),
        (0o707, "others"),
        (0o777, "group and others"),
        (0o1777, "group and others"),  # sticky is no excuse for the root itself
    ],
    ids=["770", "707", "777", "1777"],
)
def test_a_root_writable_by_group_or_others_is_not_trusted_even_if_ours_or_sticky(
    tmp_path: Path, mode: int, who: str
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    root.chmod(mode)
    reason = boot.untrusted(str(root), str(root / "id" / "site"))
    assert reason is not None and reason.startswith(f"{root} is writable by {who}")


def test_a_folder_below_the_root_writable_by_others_is_not_trusted(tmp_path: Path) -> None:
    site = tmp_path / "root" / "id" / "site"
    site.mkdir(parents=True)
    (tmp_path / "root" / "id").chmod(0o757)
    reason = boot.untrusted(str(tmp_path / "root"), str(site))
    assert reason == f"{tmp_path / 'root' / 'id'} is writable by others (mode 757)"


def test_a_symlink_below_the_root_is_not_trusted(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "root" / "id").symlink_to(tmp_path / "elsewhere")
    reason = boot.untrusted(str(tmp_path / "root"), str(tmp_path / "root" / "id" / "site"))
    assert reason == f"{tmp_path / 'root' / 'id'} is a symlink"


def test_above_the_root_others_may_write_only_a_sticky_folder(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    root = shared / "root"
    root.mkdir(parents=True)
    shared.chmod(0o777)  # anyone could rename our root away and put theirs in its place
    reason = boot.untrusted(str(root), str(root / "id"))
    assert reason == f"{shared} is writable by group and others (mode 777)"
    shared.chmod(0o1777)  # sticky, as /tmp: only we (or root) may rename our root
    assert boot.untrusted(str(root), str(root / "id")) is None


@only_root
@pytest.mark.parametrize("level", ["above", "root", "build", "site"])
def test_a_folder_owned_by_another_user_is_not_trusted(tmp_path: Path, level: str) -> None:
    above = tmp_path / "above"
    site = above / "root" / "id" / "site"
    site.mkdir(parents=True)
    folder = {"above": above, "root": above / "root", "build": site.parent, "site": site}[level]
    os.chown(folder, NOBODY, NOBODY)
    reason = boot.untrusted(str(above / "root"), str(site))
    assert reason == f"{folder} is owned by uid {NOBODY}, not by you (uid 0) or root"


def test_a_file_where_a_folder_goes_is_left_to_fail_as_unusable(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    assert boot.untrusted(str(tmp_path / "a-file" / "root"), str(tmp_path / "a-file")) is None
