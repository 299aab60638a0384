"""Linux /proc/net: pure parsers for ``dev`` and ``route``, and the one reader of the files."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Literal

__all__ = [
    "Interface",
    "NeedsLinuxError",
    "ProcNet",
    "ProcNetFormatError",
    "Route",
    "parse_net_dev",
    "parse_net_route",
]

# Route flags from <linux/route.h>.
_RTF_UP = 0x1
_RTF_GATEWAY = 0x2
_RTF_HOST = 0x4
# /proc/net/dev: 8 receive counters, then 8 transmit counters.
_DEV_COUNTERS = 16


class NeedsLinuxError(Exception):
    """The facts mesh-cni reports exist only on Linux, under /proc/net."""

    def __init__(self, platform: str, missing: Path | None = None) -> None:
        detail = platform if missing is None else f"{platform}, but {missing} is missing"
        super().__init__(f"needs Linux /proc/net (this is {detail})")
        self.platform = platform
        self.missing = missing


class ProcNetFormatError(ValueError):
    """A /proc/net file whose layout is not the one the kernel writes."""

    def __init__(self, source: str, line_number: int, reason: str) -> None:
        super().__init__(f"{source} line {line_number}: {reason}")


@dataclass(frozen=True)
class Interface:
    """A network interface and its traffic counters since boot."""

    name: str
    rx_bytes: int
    rx_packets: int
    tx_bytes: int
    tx_packets: int


@dataclass(frozen=True)
class Route:
    """One IPv4 route from the kernel's main routing table."""

    interface: str
    destination: IPv4Network
    gateway: IPv4Address
    flags: int
    metric: int

    @property
    def flag_letters(self) -> str:
        """The flags as ``route -n`` shows them: U(p), G(ateway), H(ost)."""
        letters = (("U", _RTF_UP), ("G", _RTF_GATEWAY), ("H", _RTF_HOST))
        return "".join(letter for letter, bit in letters if self.flags & bit)

    def to_json(self) -> dict[str, object]:
        """A JSON-ready mapping with addresses as strings."""
        return {
            "interface": self.interface,
            "destination": str(self.destination),
            "gateway": str(self.gateway),
            "flags": self.flag_letters,
            "metric": self.metric,
        }


def parse_net_dev(text: str, source: str = "/proc/net/dev") -> list[Interface]:
    """Parse the text of /proc/net/dev into interfaces sorted by name."""
    interfaces: list[Interface] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if "|" in line or not line.strip():
            continue  # the two header lines, whose columns are separated by '|'
        # Linux forbids ':' in interface names, so the first one ends the name.
        name, colon, counters = line.partition(":")
        fields = counters.split()
        if not colon or not name.strip() or len(fields) != _DEV_COUNTERS:
            raise ProcNetFormatError(
                source, number, f"expected 'name: <16 counters>', got {line!r}"
            )
        try:
            values = [int(field) for field in fields]
        except ValueError:
            raise ProcNetFormatError(source, number, f"non-numeric counter in {line!r}") from None
        interfaces.append(Interface(name.strip(), values[0], values[1], values[8], values[9]))
    return sorted(interfaces, key=lambda interface: interface.name)


def parse_net_route(
    text: str,
    source: str = "/proc/net/route",
    byteorder: Literal["little", "big"] = sys.byteorder,
) -> list[Route]:
    """Parse the text of /proc/net/route into routes, in the kernel's order.

    Addresses are printed as the hex of a network-order word read in host order, so the
    byte order must be that of the machine which wrote the file (normally this one).
    """

    def ipv4(hex_word: str) -> IPv4Address:
        if len(hex_word) != 8:
            raise ValueError(f"address {hex_word!r} is not 8 hex digits")
        return IPv4Address(int.from_bytes(bytes.fromhex(hex_word), byteorder).to_bytes(4, "big"))

    routes: list[Route] = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0] == "Iface":
            continue
        if len(fields) < 8:
            raise ProcNetFormatError(source, number, f"expected at least 8 columns in {line!r}")
        interface, destination, gateway, flags, _refcnt, _use, metric, mask = fields[:8]
        try:
            route = Route(
                interface=interface,
                destination=IPv4Network(f"{ipv4(destination)}/{ipv4(mask)}", strict=False),
                gateway=ipv4(gateway),
                flags=int(flags, 16),
                metric=int(metric),
            )
        except ValueError as exc:
            raise ProcNetFormatError(source, number, f"{exc} in {line!r}") from None
        routes.append(route)
    return routes


@dataclass(frozen=True)
class ProcNet:
    """A /proc/net directory as seen on ``platform``; the only code here that reads files."""

    root: Path
    platform: str

    def interfaces(self) -> list[Interface]:
        """The interfaces in ``dev``."""
        path = self.root / "dev"
        return parse_net_dev(self._read(path), source=str(path))

    def routes(self) -> list[Route]:
        """The IPv4 routes in ``route``."""
        path = self.root / "route"
        return parse_net_route(self._read(path), source=str(path))

    def _read(self, path: Path) -> str:
        # Checked before touching the disk: another OS may have a /proc that means something else.
        if self.platform != "linux":
            raise NeedsLinuxError(self.platform)
        try:
            return path.read_text()
        except FileNotFoundError:
            raise NeedsLinuxError(self.platform, missing=path) from None
