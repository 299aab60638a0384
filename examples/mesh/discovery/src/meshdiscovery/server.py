"""The mesh-discovery HTTP API and its command line.

``PUT /v1/services/<name>`` with ``{"address": "..."}`` registers a service,
``GET /v1/services`` lists them, ``GET /v1/services/<name>`` shows one,
``DELETE /v1/services/<name>`` removes one and ``GET /healthz`` is the probe.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from types import FrameType
from typing import Any
from urllib.parse import unquote, urlsplit

import meshapi
from meshapi import (
    DEFAULT_PORT,
    SERVICES_PATH,
    InvalidServiceError,
    validate_address,
    validate_name,
)

from meshdiscovery.registry import Registry

__all__ = ["DiscoveryServer", "main"]

# Access logs go through logging so that embedding the server never writes to stderr by itself.
_access_log = logging.getLogger("meshdiscovery.access")
# A registration is a name and an address; a larger body is a mistake, so refuse to buffer it.
_MAX_BODY_BYTES = 64 * 1024


class _HttpError(Exception):
    """A request the API refuses; becomes a JSON ``{"error": ...}`` response."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class DiscoveryServer(ThreadingHTTPServer):
    """An HTTP server answering the discovery API from one shared Registry."""

    # A request thread stuck on a slow client must not keep the process alive after shutdown.
    daemon_threads = True

    def __init__(self, host: str, port: int, registry: Registry | None = None) -> None:
        self.registry = registry if registry is not None else Registry()
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        """The base URL clients use, with the real port when bound to port 0."""
        host, port = self.socket.getsockname()[:2]
        return f"http://{host}:{port}"


class _Handler(BaseHTTPRequestHandler):
    server: DiscoveryServer
    server_version = "mesh-discovery"

    def do_GET(self) -> None:
        self._respond(self._get)

    def do_PUT(self) -> None:
        self._respond(self._put)

    def do_DELETE(self) -> None:
        self._respond(self._delete)

    def log_message(self, format: str, *args: object) -> None:
        _access_log.info("%s %s", self.address_string(), format % args)

    def _get(self, path: str) -> tuple[HTTPStatus, Any]:
        if path == "/healthz":
            return HTTPStatus.OK, {"status": "ok"}
        if path == SERVICES_PATH:
            return HTTPStatus.OK, [service.to_json() for service in self.server.registry.services()]
        name = self._service_name(path)
        service = self.server.registry.get(name)
        if service is None:
            raise _HttpError(HTTPStatus.NOT_FOUND, f"service {name!r} is not registered")
        return HTTPStatus.OK, service.to_json()

    def _put(self, path: str) -> tuple[HTTPStatus, Any]:
        name = self._service_name(path)
        body = self._read_json_object()
        try:
            address = validate_address(body.get("address"))
        except InvalidServiceError as exc:
            raise _HttpError(HTTPStatus.BAD_REQUEST, str(exc)) from exc
        service, created = self.server.registry.register(name, address)
        return (HTTPStatus.CREATED if created else HTTPStatus.OK), service.to_json()

    def _delete(self, path: str) -> tuple[HTTPStatus, Any]:
        name = self._service_name(path)
        if not self.server.registry.deregister(name):
            raise _HttpError(HTTPStatus.NOT_FOUND, f"service {name!r} is not registered")
        return HTTPStatus.OK, {"deregistered": name}

    def _service_name(self, path: str) -> str:
        prefix = SERVICES_PATH + "/"
        if not path.startswith(prefix):
            raise _HttpError(HTTPStatus.NOT_FOUND, f"no route for {path}")
        try:
            return validate_name(unquote(path.removeprefix(prefix)))
        except InvalidServiceError as exc:
            raise _HttpError(HTTPStatus.BAD_REQUEST, str(exc)) from exc

    def _read_json_object(self) -> dict[str, Any]:
        declared = self.headers.get("Content-Length")
        if declared is None:
            raise _HttpError(
                HTTPStatus.LENGTH_REQUIRED, "a JSON body with Content-Length is needed"
            )
        try:
            length = int(declared)
        except ValueError:
            raise _HttpError(HTTPStatus.BAD_REQUEST, f"bad Content-Length {declared!r}") from None
        if not 0 <= length <= _MAX_BODY_BYTES:
            raise _HttpError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body must be 0-{_MAX_BODY_BYTES} bytes"
            )
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError alike
            raise _HttpError(HTTPStatus.BAD_REQUEST, f"invalid JSON body: {exc}") from exc
        if not isinstance(body, dict):
            raise _HttpError(
                HTTPStatus.BAD_REQUEST, 'body must be a JSON object like {"address": "10.0.0.7:80"}'
            )
        return body

    def _respond(self, route: Callable[[str], tuple[HTTPStatus, Any]]) -> None:
        try:
            status, payload = route(urlsplit(self.path).path)
        except _HttpError as exc:
            status, payload = exc.status, {"error": str(exc)}
        data = json.dumps(payload).encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _serve_until_signalled(server: DiscoveryServer) -> None:
    """Serve until SIGTERM or SIGINT, then stop accepting, finish and close the socket."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    # serve_forever runs on a worker because shutdown() waits for it to return, which it
    # never would if called from a signal handler interrupting serve_forever itself.
    worker = threading.Thread(target=server.serve_forever, name="mesh-discovery-http")
    worker.start()
    try:
        stop.wait()
    finally:
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
        return metadata.version("mesh-discovery")
    except metadata.PackageNotFoundError:
        return "0.0.0+source"  # running from a source tree: there is no installed metadata


def _build_note() -> str:
    """' (rev abc1234, dirty, built <time>)' from the build info shipyard stamps, or ''."""
    try:
        text = metadata.distribution("mesh-discovery").read_text("shipyard_build.json")
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mesh-discovery", description="An HTTP registry of mesh services."
    )
    parser.add_argument("--version", action=_Version, help="show the version and build info")
    parser.add_argument("--libs", action=_Libs, help="show the mesh libraries and their versions")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: %(default)s)"
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help="port to bind, 0 for any (default: %(default)s)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the registry until SIGTERM or SIGINT; the first stdout line gives the URL."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    try:
        server = DiscoveryServer(args.host, args.port)
    except OSError as exc:
        print(f"mesh-discovery: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    print(f"mesh-discovery listening on {server.url}", flush=True)
    _serve_until_signalled(server)
    return 0
