"""mesh-cni's /proc/net parsers and reader, fed sample files (nothing is read from /proc)."""

from ipaddress import IPv4Address, IPv4Network

import pytest
from meshcni import (
    Interface,
    ProcNetFormatError,
    Route,
    parse_net_dev,
    parse_net_route,
)

NET_DEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
  eth0: 9876543    1234    0    0    0     0          0         0   123456     789    0    0    0     0       0          0
    lo:  4200      42    0    0    0     0          0         0     4200      42    0    0    0     0       0          0
"""  # noqa: E501

# Written by a little-endian machine: 192.168.0.1 is printed as 0100A8C0.
NET_ROUTE = """\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t0100A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0
eth0\t0000A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0
"""


def test_parse_net_dev_reads_counters_sorted_by_name() -> None:
    assert parse_net_dev(NET_DEV) == [
        Interface("eth0", rx_bytes=9876543, rx_packets=1234, tx_bytes=123456, tx_packets=789),
        Interface("lo", rx_bytes=4200, rx_packets=42, tx_bytes=4200, tx_packets=42),
    ]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("eth0 1 2 3", "expected 'name: <16 counters>'"),
        ("eth0: 1 2 3", "expected 'name: <16 counters>'"),
        ("eth0: " + " ".join(["1"] * 15 + ["x"]), "non-numeric counter"),
    ],
)
def test_parse_net_dev_names_the_bad_line(line: str, reason: str) -> None:
    with pytest.raises(ProcNetFormatError, match=f"dev-sample line 3: {reason}"):
        parse_net_dev(NET_DEV.splitlines()[0] + "\n\n" + line + "\n", source="dev-sample")


def test_parse_net_route_decodes_little_endian_addresses() -> None:
    default, local = parse_net_route(NET_ROUTE, byteorder="little")
    assert default == Route(
        interface="eth0",
        destination=IPv4Network("0.0.0.0/0"),
        gateway=IPv4Address("192.168.0.1"),
        flags=0x3,
        metric=100,
    )
    assert local.destination == IPv4Network("192.168.0.0/24")
    assert local.gateway == IPv4Address("0.0.0.0")
    assert (default.flag_letters, local.flag_letters) == ("UG", "U")
    assert default.to_json() == {
        "interface": "eth0",
        "destination": "0.0.0.0/0",
        "gateway": "192.168.0.1",
        "flags": "UG",
        "metric": 100,
    }
    # The same words read in the other byte order are other addresses.
    (big_endian_default, _) = parse_net_route(NET_ROUTE, byteorder="big")
    assert big_endian_default.gateway == IPv4Address("1.0.168.192")


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("eth0\t00000000\t0100A8C0\t0003", "expected at least 8 columns"),
        ("eth0\t000000\t0100A8C0\t0003\t0\t0\t100\t00000000", "is not 8 hex digits"),
        ("eth0\t00000000\t0100A8C0\tzz\t0\t0\t100\t00000000", "invalid literal"),
    ],
)
def test_parse_net_route_names_the_bad_line(line: str, reason: str) -> None:
    with pytest.raises(ProcNetFormatError, match=f"route-sample line 2: .*{reason}"):
        parse_net_route(NET_ROUTE.splitlines()[0] + "\n" + line, source="route-sample")
