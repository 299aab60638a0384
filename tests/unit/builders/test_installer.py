"""The installer's options for a target platform: pip's tags and the environment it gets
(issue 15: macOS 11 and Windows; real installs are in test_resolve.py and
zipapp/test_zipapp_platforms_os.py)."""

from __future__ import annotations

from shipyard.builders import installer as installing
from shipyard.manifest import PLATFORMS


def test_the_installer_is_asked_for_macos_11_and_the_windows_tags() -> None:
    assert installing._pip_platforms("darwin/arm64") == ["macosx_11_0_arm64"]
    assert installing._pip_platforms("darwin/amd64") == ["macosx_11_0_x86_64"]
    assert installing._pip_platforms("windows/amd64") == ["win_amd64"]
    assert installing._pip_platforms("windows/arm64") == ["win_arm64"]
    assert installing.target_env("darwin/arm64") == {"MACOSX_DEPLOYMENT_TARGET": "11.0"}
    assert installing.target_env("windows/arm64") == {}
    assert set(installing.PLATFORM_ARCH) == set(PLATFORMS)
