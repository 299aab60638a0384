"""mesh-cni's command line, reading a sample /proc/net from a temporary directory."""

import json
import sys
from pathlib import Path

import pytest
from meshcni.main import EXIT_NEEDS_LINUX, main

NET_DEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
  eth0: 9876543    1234    0    0    0     0          0         0   123456     789    0    0    0     0       0          0
    lo:  4200      42    0    0    0     0          0         0     4200      42    0    0    0     0       0          0
"""  # noqa: E501


@pytest.fixture
def proc_net(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A sample /proc/net, read as on Linux whatever this machine runs."""
    monkeypatch.setattr(sys, "platform", "linux")
    (tmp_path / "dev").write_text(NET_DEV)
    route = "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\n"
    (tmp_path / "route").write_text(
        route + f"eth0\t00000000\t{_word('192.168.0.1')}\t0003\t0\t0\t100\t00000000\n"
    )
    return tmp_path


def _word(address: str) -> str:
    """The address as /proc/net/route prints it on this machine (host byte order)."""
    packed = bytes(int(part) for part in address.split("."))
    return int.from_bytes(packed, "big").to_bytes(4, sys.byteorder).hex().upper()


def test_interfaces_table(proc_net: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--proc-net", str(proc_net), "interfaces"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "NAME  RX_BYTES  RX_PACKETS  TX_BYTES  TX_PACKETS",
        "eth0  9876543   1234        123456    789",
        "lo    4200      42          4200      42",
    ]


def test_routes_json(proc_net: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--proc-net", str(proc_net), "routes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {
            "interface": "eth0",
            "destination": "0.0.0.0/0",
            "gateway": "192.168.0.1",
            "flags": "UG",
            "metric": 100,
        }
    ]


def test_a_malformed_file_exits_1(proc_net: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (proc_net / "dev").write_text("eth0: 1 2 3\n")
    assert main(["--proc-net", str(proc_net), "interfaces"]) == 1
    assert capsys.readouterr().err.startswith(f"mesh-cni: {proc_net / 'dev'} line 1:")


def test_not_linux_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    assert main(["--proc-net", str(tmp_path), "routes"]) == EXIT_NEEDS_LINUX == 2
    assert capsys.readouterr().err == "mesh-cni: needs Linux /proc/net (this is darwin)\n"
    # On Linux, a /proc/net without the file is not a Linux /proc/net either.
    monkeypatch.setattr(sys, "platform", "linux")
    assert main(["--proc-net", str(tmp_path), "interfaces"]) == EXIT_NEEDS_LINUX
    assert f"{tmp_path / 'dev'} is missing" in capsys.readouterr().err
