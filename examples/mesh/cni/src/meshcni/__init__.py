"""mesh-cni: a Linux node's network interfaces and IPv4 routes, read from /proc/net."""

from meshcni.procnet import (
    Interface,
    NeedsLinuxError,
    ProcNet,
    ProcNetFormatError,
    Route,
    parse_net_dev,
    parse_net_route,
)

__all__ = [
    "Interface",
    "NeedsLinuxError",
    "ProcNet",
    "ProcNetFormatError",
    "Route",
    "parse_net_dev",
    "parse_net_route",
]
