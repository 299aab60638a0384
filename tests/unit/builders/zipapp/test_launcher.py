"""The launcher shipped beside a Windows zipapp (`zipapp.launcher`)."""

from __future__ import annotations

import pytest

from shipyard.builders.zipapp.launcher import launcher, launcher_name
from shipyard.errors import ShipyardError


def test_the_windows_launcher_runs_the_archive_beside_it_on_its_python() -> None:
    assert launcher_name("meshctl") == "meshctl.cmd"
    assert launcher("meshctl-1.4.0-windows_amd64.pyz", "3.11") == (
        b'@py -3.11 "%~dp0meshctl-1.4.0-windows_amd64.pyz" %*\r\n'
    )
    for bad in ('x" & del *.pyz', "a%PATH%.pyz", "app.exe", "-x.pyz"):
        with pytest.raises(ShipyardError):
            launcher(bad, "3.11")
    with pytest.raises(ShipyardError):
        launcher("app.pyz", "3.11 & calc")
