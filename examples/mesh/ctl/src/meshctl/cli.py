"""The meshctl command line: register, list and deregister services in mesh-discovery."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from importlib import metadata

import meshapi
from meshapi import DEFAULT_PORT, DiscoveryClient, DiscoveryError

__all__ = ["DEFAULT_DISCOVERY", "main"]

DEFAULT_DISCOVERY = f"http://127.0.0.1:{DEFAULT_PORT}"
"""Where mesh-discovery listens when neither --discovery nor MESH_DISCOVERY says otherwise."""


def _installed_version() -> str:
    try:
        return metadata.version("meshctl")
    except metadata.PackageNotFoundError:
        return "0.0.0+source"  # running from a source tree: there is no installed metadata


def _build_note() -> str:
    """' (rev abc1234, dirty, built <time>)' from the build info shipyard stamps, or ''."""
    try:
        text = metadata.distribution("meshctl").read_text("shipyard_build.json")
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


class _Libs(argparse.Action):
    """--libs: the in-repository libraries this program runs with, and their versions."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(f"{meshapi.DISTRIBUTION} {meshapi.installed_version()}")
        parser.exit()


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    # socket timeouts must be positive; nan and inf would make the wait meaningless.
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, not {text!r}")
    return seconds


def _parser(default_discovery: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="meshctl", description=__doc__)
    parser.add_argument("--version", action=_Version, help="show the version and build info")
    parser.add_argument("--libs", action=_Libs, help="show the mesh libraries and their versions")
    parser.add_argument(
        "--discovery",
        metavar="URL",
        default=default_discovery,
        help=f"mesh-discovery base URL (default: $MESH_DISCOVERY or {DEFAULT_DISCOVERY})",
    )
    parser.add_argument(
        "--timeout", type=_seconds, default=5.0, help="seconds to wait for discovery (default: 5)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    register = commands.add_parser("register", help="register NAME at ADDRESS (or move it)")
    register.add_argument("name", metavar="NAME")
    register.add_argument("address", metavar="ADDRESS", help="e.g. 10.0.0.7:8080")
    listing = commands.add_parser("list", help="list registered services")
    shown = listing.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print a JSON list")
    shown.add_argument("--toml", action="store_true", help="print TOML (the `toml` extra)")
    deregister = commands.add_parser("deregister", help="remove NAME from the registry")
    deregister.add_argument("name", metavar="NAME")
    return parser


class _MissingExtra(Exception):
    """An option needs an optional dependency that is not installed."""


def _toml(services: list[dict[str, str]]) -> str:
    try:
        import tomli_w  # type: ignore[import-not-found, unused-ignore]  # the extra
    except ImportError:
        raise _MissingExtra("--toml needs the toml extra: pip install 'meshctl[toml]'") from None
    text: str = tomli_w.dumps({"services": services})
    return text


def _run(args: argparse.Namespace, client: DiscoveryClient) -> None:
    if args.command == "register":
        service = client.register(args.name, args.address)
        print(f"registered {service.name} at {service.address}")
    elif args.command == "list":
        services = client.services()
        if args.json:
            print(json.dumps([asdict(service) for service in services], indent=2))
        elif args.toml:
            print(_toml([asdict(service) for service in services]), end="")
        elif not services:
            print("no services registered", file=sys.stderr)
        else:
            width = max(len("NAME"), *(len(service.name) for service in services))
            print(f"{'NAME':<{width}}  ADDRESS")
            for service in services:
                print(f"{service.name:<{width}}  {service.address}")
    elif args.command == "deregister":
        client.deregister(args.name)
        print(f"deregistered {args.name}")
    else:  # argparse only accepts the commands above; this guards against a new one unwired
        raise AssertionError(f"unhandled command {args.command!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run meshctl; exit status 1 when discovery is unreachable or refuses the request."""
    # An empty MESH_DISCOVERY (e.g. `MESH_DISCOVERY= meshctl list`) means "use the default".
    args = _parser(os.environ.get("MESH_DISCOVERY") or DEFAULT_DISCOVERY).parse_args(argv)
    try:
        _run(args, DiscoveryClient(args.discovery, timeout=args.timeout))
    except DiscoveryError as exc:
        print(f"meshctl: {exc}", file=sys.stderr)
        return 1
    except _MissingExtra as exc:
        print(f"meshctl: {exc}", file=sys.stderr)
        return 2
    return 0
