"""The machine a zipapp runs on and the check that its archive was built for it
(`_boot.host`); macOS and Windows faked at the one seam, `host._os`."""

from __future__ import annotations

import sys

import pytest

from shipyard.builders.zipapp import _boot as boot
from shipyard.builders.zipapp._boot import host
from tests.unit.builders.zipapp.test_zipapp_platforms_os import SIX


def test_check_target_allows_any_machine_of_a_targeted_os_for_pure_archives() -> None:
    info = {
        "binary": "app",
        "version": "1",
        "python": "3.11",
        "platform": "any",
        "platforms": ["linux/amd64", "linux/arm64"],
    }
    boot.check_target(info, (3, 11), "linux", "riscv64")
    with pytest.raises(boot.BootError, match=r"this machine is darwin/arm64"):
        boot.check_target(info, (3, 11), "darwin", "arm64")
    with pytest.raises(boot.BootError, match=r"but this is Python 3\.12"):
        boot.check_target(info, (3, 12), "linux", "x86_64")
    arm = {**info, "platform": "linux/arm64", "platforms": ["linux/arm64"]}
    boot.check_target(arm, (3, 11), "linux", "aarch64")
    with pytest.raises(boot.BootError, match=r"use app-1-linux_amd64\.pyz$"):
        boot.check_target(arm, (3, 11), "linux", "x86_64")


def test_the_seam_maps_sys_platform_to_manifest_names(monkeypatch: pytest.MonkeyPatch) -> None:
    for platform, name in (("win32", "windows"), ("darwin", "darwin"), ("linux", "linux")):
        monkeypatch.setattr(sys, "platform", platform)
        assert host._os() == name == boot.system()


@pytest.mark.parametrize(
    ("system", "machine", "platform"),
    [
        ("darwin", "arm64", "darwin/arm64"),
        ("darwin", "x86_64", "darwin/amd64"),
        ("windows", "amd64", "windows/amd64"),
        ("windows", "arm64", "windows/arm64"),
    ],
)
def test_check_target_knows_macos_and_windows_machines(
    system: str, machine: str, platform: str
) -> None:
    info = {"binary": "app", "version": "1", "python": "3.11"}
    boot.check_target(
        {**info, "platform": platform, "platforms": [platform]}, (3, 11), system, machine
    )
    universal = {**info, "platform": "any", "platforms": list(SIX)}
    boot.check_target(universal, (3, 11), system, machine)
    other = "amd64" if platform.endswith("arm64") else "arm64"
    wrong = f"{system}/{other}"
    with pytest.raises(boot.BootError) as caught:
        boot.check_target(
            {**info, "platform": wrong, "platforms": [wrong]}, (3, 11), system, machine
        )
    here = platform.partition("/")[2]
    assert str(caught.value) == (
        f"built for {wrong}, but this machine is {system}/{here}; use app-1-{system}_{here}.pyz"
    )
    linux = {**info, "platform": "any", "platforms": ["linux/amd64", "linux/arm64"]}
    with pytest.raises(boot.BootError, match=f"this machine is {system}/{here};"):
        boot.check_target(linux, (3, 11), system, machine)


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("3.11.7 (tags/v3.11.7:fa7a6f2, Dec  4 2023) [MSC v.1937 64 bit (AMD64)]", "amd64"),
        ("3.12.1 (tags/v3.12.1:2305ca5, Dec  7 2023) [MSC v.1937 64 bit (ARM64)]", "arm64"),
        ("3.11.7 (tags/v3.11.7:fa7a6f2, Dec  4 2023) [MSC v.1937 32 bit (Intel)]", "x86"),
    ],
)
def test_the_machine_on_windows_is_the_interpreters(
    monkeypatch: pytest.MonkeyPatch, version: str, expected: str
) -> None:
    monkeypatch.setattr(host, "_os", lambda: "windows")
    monkeypatch.setattr(sys, "version", version)
    assert boot.machine() == expected
