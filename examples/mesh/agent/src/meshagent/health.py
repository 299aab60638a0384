"""The agent's probe endpoints: ``GET /healthz`` (alive) and ``GET /readyz`` (serving)."""

from __future__ import annotations

import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

__all__ = ["HealthServer", "health_report"]


def health_report(version: str, yaml_native: bool) -> dict[str, object]:
    """The ``/healthz`` body, also what ``mesh-agent --once`` prints."""
    return {"status": "ok", "version": version, "yaml_native": yaml_native}


class HealthServer(ThreadingHTTPServer):
    """Serves the probes; ``/readyz`` answers 503 until ``ready`` is set."""

    # A probe stuck on a slow client must not keep the process alive after shutdown.
    daemon_threads = True

    def __init__(self, host: str, port: int, report: dict[str, object]) -> None:
        self.report = report
        self.ready = threading.Event()
        super().__init__((host, port), _ProbeHandler)

    @property
    def url(self) -> str:
        """The base URL, with the real port when bound to port 0."""
        host, port = self.socket.getsockname()[:2]
        return f"http://{host}:{port}"


class _ProbeHandler(BaseHTTPRequestHandler):
    server: HealthServer
    server_version = "mesh-agent"

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/healthz":
            self._send(HTTPStatus.OK, self.server.report)
        elif path == "/readyz":
            ready = self.server.ready.is_set()
            status = HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE
            self._send(status, {"ready": ready})
        else:
            self._send(HTTPStatus.NOT_FOUND, {"error": f"no route for {path}"})

    def log_message(self, format: str, *args: object) -> None:
        # Probes arrive every few seconds for the life of the pod; logging each drowns the rest.
        pass

    def _send(self, status: HTTPStatus, payload: object) -> None:
        data = json.dumps(payload).encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
