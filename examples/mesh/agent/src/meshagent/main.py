"""The mesh-agent command line: serve the health probes until SIGTERM, or report once."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from types import FrameType

import meshconfig
from meshconfig import YAML_NATIVE, AgentConfig, ConfigError, load_agent_config

from meshagent.health import HealthServer, health_report

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "main"]

DEFAULT_HOST = "127.0.0.1"
"""Loopback unless told otherwise: probes come from the local kubelet or runtime."""
DEFAULT_PORT = 15021
"""Istio's health-check port for its agent."""


def _serve_until_signalled(server: HealthServer) -> None:
    """Serve and report ready until SIGTERM or SIGINT, then drain and close the socket."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    # serve_forever runs on a worker because shutdown() waits for it to return, which it
    # never would if called from a signal handler interrupting serve_forever itself.
    worker = threading.Thread(target=server.serve_forever, name="mesh-agent-probes")
    worker.start()
    server.ready.set()
    try:
        stop.wait()
    finally:
        server.ready.clear()
        server.shutdown()
        worker.join()
        server.server_close()


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be an integer 0-65535, not {text!r}")
    return port


def _installed_version() -> str:
    try:
        return metadata.version("mesh-agent")
    except metadata.PackageNotFoundError:
        return "0.0.0+source"  # running from a source tree: there is no installed metadata


def _build_note() -> str:
    """' (rev abc1234, dirty, built <time>)' from the build info shipyard stamps, or ''."""
    try:
        text = metadata.distribution("mesh-agent").read_text("shipyard_build.json")
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
        print(f"{meshconfig.DISTRIBUTION} {meshconfig.installed_version()}")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mesh-agent", description=__doc__)
    parser.add_argument("--version", action=_Version, help="show the version and build info")
    parser.add_argument("--libs", action=_Libs, help="show the mesh libraries and their versions")
    parser.add_argument("--config", type=Path, metavar="PATH", help="YAML file with host/port")
    # No argparse defaults: None means "not given", so the config file can fill it in.
    parser.add_argument("--host", help=f"address to bind (default: {DEFAULT_HOST})")
    parser.add_argument("--port", type=_port, help=f"port, 0 for any (default: {DEFAULT_PORT})")
    parser.add_argument(
        "--once", action="store_true", help="print the health JSON and exit; opens no socket"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agent; exit status 1 for a bad config file or an unusable address."""
    args = _parser().parse_args(argv)
    try:
        config = load_agent_config(args.config) if args.config is not None else AgentConfig()
    except ConfigError as exc:
        print(f"mesh-agent: {exc}", file=sys.stderr)
        return 1
    report = health_report(_installed_version(), YAML_NATIVE)
    if args.once:
        print(json.dumps(report))
        return 0
    host = next(value for value in (args.host, config.host, DEFAULT_HOST) if value is not None)
    port = next(value for value in (args.port, config.port, DEFAULT_PORT) if value is not None)
    try:
        server = HealthServer(host, port, report)
    except OSError as exc:
        print(f"mesh-agent: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 1
    print(f"mesh-agent serving probes on {server.url}", flush=True)
    _serve_until_signalled(server)
    return 0
