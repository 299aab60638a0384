"""The mesh-cni command line: print a node's ``interfaces`` or ``routes``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from meshcni.procnet import Interface, NeedsLinuxError, ProcNet, ProcNetFormatError, Route

__all__ = ["EXIT_NEEDS_LINUX", "main"]

EXIT_NEEDS_LINUX = 2
"""Exit status when /proc/net is not there to read (not Linux, or not mounted)."""


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [list(header), *([str(cell) for cell in row] for row in rows)]
    widths = [max(len(row[column]) for row in cells) for column in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


def _interfaces_text(interfaces: Sequence[Interface]) -> str:
    header = ("NAME", "RX_BYTES", "RX_PACKETS", "TX_BYTES", "TX_PACKETS")
    rows = [(i.name, i.rx_bytes, i.rx_packets, i.tx_bytes, i.tx_packets) for i in interfaces]
    return _table(header, rows)


def _routes_text(routes: Sequence[Route]) -> str:
    header = ("DESTINATION", "GATEWAY", "FLAGS", "METRIC", "IFACE")
    rows = [(r.destination, r.gateway, r.flag_letters, r.metric, r.interface) for r in routes]
    return _table(header, rows)


def _installed_version() -> str:
    try:
        return metadata.version("mesh-cni")
    except metadata.PackageNotFoundError:
        return "0.0.0+source"  # running from a source tree: there is no installed metadata


def _build_note() -> str:
    """' (rev abc1234, dirty, built <time>)' from the build info shipyard stamps, or ''."""
    try:
        text = metadata.distribution("mesh-cni").read_text("shipyard_build.json")
        info = json.loads(text) if text else {}
    except (metadata.PackageNotFoundError, ValueError):
        return ""  # not installed, or not built by shipyard
    if not isinstance(info, dict):
        return ""
    parts = [f"rev {str(info['revision'])[:7]}"] if info.get("revision") else []
    parts += ["dirty"] if info.get("dirty") else []
    parts += [f"built {info['created']}"] if info.get("created") else []
    return f" ({', '.join(parts)})" if parts else ""


class _Version(argparse.Action):
    """--version, printed whole: argparse's own version action wraps long lines."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(f"{parser.prog} {_installed_version()}{_build_note()}")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mesh-cni", description=__doc__)
    parser.add_argument("--version", action=_Version, help="show the version and build info")
    parser.add_argument(
        "--proc-net",
        type=Path,
        default=Path("/proc/net"),
        help="the /proc/net to read, e.g. a host's mounted at /host/proc/net "
        "(default: %(default)s)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in (("interfaces", "list interfaces"), ("routes", "list IPv4 routes")):
        command = commands.add_parser(name, help=help_text)
        command.add_argument("--json", action="store_true", help="print a JSON list")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run mesh-cni; exit status 2 when there is no Linux /proc/net to read."""
    args = _parser().parse_args(argv)
    proc_net = ProcNet(args.proc_net, sys.platform)
    try:
        if args.command == "interfaces":
            interfaces = proc_net.interfaces()
            payload: list[dict[str, object]] = [asdict(i) for i in interfaces]
            text = _interfaces_text(interfaces)
        else:
            routes = proc_net.routes()
            payload = [route.to_json() for route in routes]
            text = _routes_text(routes)
    except NeedsLinuxError as exc:
        print(f"mesh-cni: {exc}", file=sys.stderr)
        return EXIT_NEEDS_LINUX
    except (ProcNetFormatError, OSError) as exc:
        print(f"mesh-cni: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(payload, indent=2) if args.json else text)
    return 0
