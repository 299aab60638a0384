"""Running the examples/mesh projects in tests: from their source trees, on loopback.

Servers run on a thread for a block (`serving`), CLIs as real processes
(`spawn`, `terminate`), and every wait is bounded by `TIMEOUT`.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

MESH = Path(__file__).resolve().parents[2] / "examples" / "mesh"
SOURCE_PATH = os.pathsep.join(
    str(MESH / project / "src")
    for project in ("agent", "cni", "ctl", "discovery", "echo", "libs/api", "libs/config")
)
# Generous for a loaded CI machine; every wait in the example tests normally ends in milliseconds.
TIMEOUT = 10.0


@contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[None]:
    """Run ``server`` on a thread for the block, then shut it down and close its socket."""
    # A short poll interval keeps shutdown() from waiting out the default half second.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        thread.join(TIMEOUT)
        server.server_close()


def bound_port(server: socketserver.TCPServer | socket.socket) -> int:
    """The real port of a server or socket bound to port 0."""
    sock = server if isinstance(server, socket.socket) else server.socket
    return int(sock.getsockname()[1])


def closed_port() -> int:
    """A loopback port with (almost certainly) nothing listening on it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return bound_port(probe)


def http_json(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
    """One request to 127.0.0.1:``port``; the status and the decoded JSON body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        if body is None:  # request() would add "Content-Length: 0" to a PUT; send none at all
            connection.putrequest(method, path)
            connection.endheaders()
        else:
            connection.request(method, path, body=body)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def expected_version(dist: str) -> str:
    """What a CLI's --version should report for ``dist`` in this environment."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "0.0.0+source"


def spawn(module: str, *args: str) -> subprocess.Popen[str]:
    """Start ``module``'s main() as a real process, importing the examples from source."""
    return subprocess.Popen(
        [sys.executable, "-c", f"from {module} import main; raise SystemExit(main())", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": SOURCE_PATH},
    )


def terminate(process: subprocess.Popen[str]) -> tuple[int, str]:
    """SIGTERM ``process``; its exit status and remaining stderr."""
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=TIMEOUT)
    return process.returncode, stderr
