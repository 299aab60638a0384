"""The mesh-echo command line: ``serve`` an echo port, or ``send`` a message to one."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from importlib import metadata
from types import FrameType

from meshecho.client import EchoError, send
from meshecho.server import EchoServer

__all__ = ["main"]


def _serve_until_signalled(server: EchoServer) -> None:
    """Serve until SIGTERM or SIGINT, then stop accepting and close the socket."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    # serve_forever runs on a worker because shutdown() waits for it to return, which it
    # never would if called from a signal handler interrupting serve_forever itself.
    worker = threading.Thread(target=server.serve_forever, name="mesh-echo-tcp")
    worker.start()
    try:
        stop.wait()
    finally:
        server.shutdown()
        worker.join()
        server.server_close()


def _serve(host: str, port: int) -> int:
    try:
        server = EchoServer(host, port)
    except OSError as exc:
        print(f"mesh-echo: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 1
    # The bare port on its own line is the readiness signal scripts and tests wait for.
    print(server.port, flush=True)
    _serve_until_signalled(server)
    return 0


def _send(message: str, host: str, port: int, timeout: float) -> int:
    try:
        reply = send(message, host, port, timeout=timeout)
    except EchoError as exc:
        print(f"mesh-echo: {exc}", file=sys.stderr)
        return 1
    print(reply)
    if reply != message:
        print(
            f"mesh-echo: reply differs from the {len(message)}-char message sent", file=sys.stderr
        )
        return 1
    return 0


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be an integer 0-65535, not {text!r}")
    return port


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    # socket timeouts must be positive; nan and inf would make the wait meaningless.
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, not {text!r}")
    return seconds


def _installed_version() -> str:
    try:
        return metadata.version("mesh-echo")
    except metadata.PackageNotFoundError:
        return "0.0.0+source"  # running from a source tree: there is no installed metadata


def _build_note() -> str:
    """' (rev abc1234, dirty, built <time>)' from the build info shipyard stamps, or ''."""
    try:
        text = metadata.distribution("mesh-echo").read_text("shipyard_build.json")
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
    parser = argparse.ArgumentParser(prog="mesh-echo", description=__doc__)
    parser.add_argument("--version", action=_Version, help="show the version and build info")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="run the echo server; prints the bound port")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    serve.add_argument(
        "--port", type=_port, default=15007, help="port to bind, 0 for any (default: %(default)s)"
    )
    client = commands.add_parser("send", help="send MESSAGE and print the reply")
    client.add_argument("message", metavar="MESSAGE")
    client.add_argument("--host", default="127.0.0.1", help="server address (default: %(default)s)")
    client.add_argument("--port", type=_port, required=True, help="server port")
    client.add_argument("--timeout", type=_seconds, default=5.0, help="seconds (default: 5)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run mesh-echo; ``send`` exits 0 only when the reply matches the message."""
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args.host, args.port)
    return _send(args.message, args.host, args.port, args.timeout)
