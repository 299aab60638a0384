"""The examples/mesh mesh-cni project works: it parses /proc/net text, names the line of
malformed input, prints tables and JSON, and exits 2 with one line off Linux."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

import pytest

from tests.unit._mesh import SOURCE_PATH, TIMEOUT

# The examples are not installed in the test environment; import them from their src trees.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples/mesh/cni/src"))

from meshcni import Interface, ProcNet, ProcNetFormatError, Route, parse_net_dev, parse_net_route
from meshcni.main import main as cni_main

# /proc/net/dev as a little-endian Linux host writes it; lo is listed after eth0 on purpose.
SAMPLE_NET_DEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
  eth0: 272461481    6960    0    0    0     0          0         0   340660    4298    0    0    0     0       0          0
    lo:    3193      29    0    0    0     0          0         0     3193      29    0    0    0     0       0          0
"""  # noqa: E501 - kernel output, kept verbatim
SAMPLE_NET_ROUTE = """\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0
eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
"""


def test_cni_parses_net_dev_text() -> None:
    assert parse_net_dev(SAMPLE_NET_DEV) == [
        Interface("eth0", rx_bytes=272461481, rx_packets=6960, tx_bytes=340660, tx_packets=4298),
        Interface("lo", rx_bytes=3193, rx_packets=29, tx_bytes=3193, tx_packets=29),
    ]


@pytest.mark.parametrize(
    "bad_line",
    ["  eth0 272461481 6960", "  eth0: 1 2 3", "  eth0: " + " ".join(["1"] * 15) + " x"],
)
def test_cni_names_the_line_of_malformed_net_dev(bad_line: str) -> None:
    header = "".join(SAMPLE_NET_DEV.splitlines(keepends=True)[:2])

    with pytest.raises(ProcNetFormatError, match=r"^/proc/net/dev line 3: "):
        parse_net_dev(header + bad_line + "\n")


def test_cni_parses_net_route_text() -> None:
    routes = parse_net_route(SAMPLE_NET_ROUTE, byteorder="little")

    assert routes == [
        Route("eth0", IPv4Network("0.0.0.0/0"), IPv4Address("192.0.2.1"), flags=3, metric=100),
        Route("eth0", IPv4Network("192.0.2.0/24"), IPv4Address("0.0.0.0"), flags=1, metric=0),
    ]
    assert [route.flag_letters for route in routes] == ["UG", "U"]


@pytest.mark.skipif(sys.platform != "linux", reason="reads the real /proc/net")
def test_cni_reads_loopback_from_real_proc_net_dev() -> None:
    names = [interface.name for interface in ProcNet(Path("/proc/net"), sys.platform).interfaces()]

    assert "lo" in names


def test_cni_interfaces_cli_prints_table_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A copied /proc/net keeps the output exact; the platform must still say Linux.
    monkeypatch.setattr(sys, "platform", "linux")
    (tmp_path / "dev").write_text(SAMPLE_NET_DEV)
    (tmp_path / "route").write_text(SAMPLE_NET_ROUTE)
    proc_net = ["--proc-net", str(tmp_path)]

    assert cni_main([*proc_net, "interfaces"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "NAME  RX_BYTES   RX_PACKETS  TX_BYTES  TX_PACKETS",
        "eth0  272461481  6960        340660    4298",
        "lo    3193       29          3193      29",
    ]
    assert cni_main([*proc_net, "interfaces", "--json"]) == 0
    assert [entry["name"] for entry in json.loads(capsys.readouterr().out)] == ["eth0", "lo"]
    assert cni_main([*proc_net, "routes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0] == {
        "interface": "eth0",
        "destination": "0.0.0.0/0",
        "gateway": "192.0.2.1" if sys.byteorder == "little" else "1.2.0.192",
        "flags": "UG",
        "metric": 100,
    }


def test_cni_on_non_linux_exits_2_with_one_line_and_no_traceback() -> None:
    code = (
        "import sys; sys.platform = 'darwin'; from meshcni.main import main; "
        "raise SystemExit(main(['interfaces']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SOURCE_PATH},
        timeout=TIMEOUT,
        check=False,
    )

    assert result.returncode == 2
    assert result.stderr == "mesh-cni: needs Linux /proc/net (this is darwin)\n"
    assert result.stdout == ""


def test_cni_without_proc_net_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    missing = tmp_path / "no-proc" / "net"

    assert cni_main(["--proc-net", str(missing), "routes"]) == 2
    assert capsys.readouterr().err == (
        f"mesh-cni: needs Linux /proc/net (this is linux, but {missing / 'route'} is missing)\n"
    )
