"""Shared-cache servers on 127.0.0.1 for the remote cache tests: BuildGrid and nginx WebDAV.

`running_buildgrid` starts BuildGrid's `bgd` (a pinned release in its own virtual
environment, installed by scripts/services.sh) with a cache-only configuration:
the CAS, ActionCache and ByteStream services of one instance over a disk storage
folder, no database, no execution. `running_nginx` starts Debian's nginx with
its WebDAV module serving the HTTP cache protocol from a folder (PUT with
create_full_put_path; GET and HEAD as static files), optionally behind Basic
authentication. Either can serve TLS with a certificate from a CA made in the
test (`registries.make_certificates`).

Each yields a `CacheServer`: the `--cache=` URL, where the stored blobs are on
disk (for a test that changes one behind the server's back) and `stop()`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.conftest import SERVICES_ENV, read_env_file, require_services
from tests.integration.registries import free_port

__all__ = [
    "CacheServer",
    "TlsFiles",
    "buildgrid_binary",
    "make_client_certificate",
    "nginx_binary",
    "running_buildgrid",
    "running_nginx",
]

START_SECONDS = 60.0
HINT = "install them with: bash scripts/services.sh"


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a CA and the server certificate it signed (with its key); with
    `clients`, the server asks for a client certificate that one signed (mutual TLS)."""

    ca: Path
    cert: Path
    key: Path
    clients: Path | None = None


def make_client_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed client certificate and its key (PEM files, made by openssl): the
    certificate is also what a server trusts for mutual TLS (`TlsFiles.clients`)."""
    cert, key = folder / "client.crt", folder / "client.key"
    options = (
        "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
        "-subj /CN=shipyard-test-client -addext extendedKeyUsage=clientAuth"
    )
    subprocess.run(
        ["openssl", *options.split(), "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


@dataclass
class CacheServer:
    """A running cache server: its `--cache=` URL, its blobs on disk, and how to stop it."""

    url: str
    port: int
    blobs: Path  # the folder the server keeps CAS blobs in
    log: Path
    layout: str  # "buildgrid": blobs/<2 hex>/<62 hex>; "nginx": blobs/<64 hex>
    process: subprocess.Popen[bytes] | None = None

    def blob(self, sha256: str) -> Path:
        """Where the server keeps the blob `sha256`."""
        if self.layout == "buildgrid":
            return self.blobs / sha256[:2] / sha256[2:]
        return self.blobs / sha256

    def stop(self) -> None:
        """Stop the server (and wait for it)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)


def _setting(name: str, default: str) -> str:
    return os.environ.get(name) or read_env_file(SERVICES_ENV).get(name) or default


def _binary(variable: str, default: str, what: str) -> str:
    """The program's path, or skip (fail under SHIPYARD_REQUIRE_SERVICES=1) without it."""
    path = _setting(variable, default)
    if Path(path).is_file() and os.access(path, os.X_OK):
        return path
    message = f"{what} not found at {path} (${variable}); {HINT}"
    if require_services():
        pytest.fail(f"SHIPYARD_REQUIRE_SERVICES=1: {message}", pytrace=False)
    pytest.skip(message)


def buildgrid_binary() -> str:
    """BuildGrid's `bgd`, from its own virtual environment."""
    return _binary("SHIPYARD_BUILDGRID", "/opt/buildgrid-venv/bin/bgd", "BuildGrid (bgd)")


def nginx_binary() -> str:
    """Debian's nginx (with http_dav_module)."""
    return _binary("SHIPYARD_NGINX", "/usr/sbin/nginx", "nginx")


def _wait_for_port(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    process.kill()
    process.wait()
    text = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    raise RuntimeError(f"the cache server did not listen on 127.0.0.1:{port}:\n{text}")


@contextmanager
def _serving(
    argv: list[str], folder: Path, output: Path, server: CacheServer
) -> Iterator[CacheServer]:
    """Start `argv` in `folder` (its output to `output`) as `server`; stop it at the end."""
    with output.open("wb") as out:
        server.process = subprocess.Popen(
            argv, cwd=folder, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        _wait_for_port(server.process, server.port, server.log)
        yield server
    finally:
        server.stop()


def _buildgrid_config(
    folder: Path, port: int, instance: str, tls: TlsFiles | None, reads_from: CacheServer | None
) -> str:
    channel = f'  - !channel\n    address: "127.0.0.1:{port}"\n'
    if tls is None:
        channel += "    insecure-mode: true\n"
    else:
        channel += (
            "    insecure-mode: false\n    credentials:\n"
            f"      tls-server-key: {tls.key}\n      tls-server-cert: {tls.cert}\n"
        )
        if tls.clients is not None:
            channel += f"      tls-client-certs: {tls.clients}\n"
    storage = folder / "storage"
    caches = (
        "caches:\n  - !lru-action-cache &ac\n    storage: *cas\n"
        "    max-cached-refs: 100000\n    allow-updates: true\n"
        "    cache-failed-actions: false\n"
    )
    if reads_from is not None:
        # The other server's CAS folder and, through its own API, its ActionCache;
        # this one's ActionCache takes no updates (its capabilities say so).
        storage = reads_from.blobs.parents[1]
        caches = (
            "caches:\n  - !lru-action-cache &seen\n    storage: *cas\n"
            "    max-cached-refs: 100000\n    allow-updates: true\n"
            f"  - !remote-action-cache &upstream\n    url: http://127.0.0.1:{reads_from.port}\n"
            f"    instance-name: {instance}\n    retries: 0\n"
            "  - !with-cache-action-cache &ac\n    cache: *seen\n    fallback: *upstream\n"
            "    allow-updates: false\n    cache-failed-actions: false\n"
        )
    return (
        f"server:\n{channel}"
        "authorization:\n  method: none\n"
        f"storages:\n  - !disk-storage &cas\n    path: {storage}\n"
        f"{caches}"
        f"instances:\n  - name: {instance}\n    services:\n"
        "      - !action-cache\n        cache: *ac\n"
        "      - !cas\n        storage: *cas\n"
        "      - !bytestream\n        storage: *cas\n"
        "thread-pool-size: 10\n"
    )


@contextmanager
def running_buildgrid(
    folder: Path,
    *,
    instance: str = "main",
    tls: TlsFiles | None = None,
    reads_from: CacheServer | None = None,
) -> Iterator[CacheServer]:
    """A cache-only BuildGrid on a free 127.0.0.1 port, stopped at the end. With
    `reads_from` (another running BuildGrid): a read-only view of that server's
    cache, whose ActionCache takes no updates."""
    bgd = buildgrid_binary()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "storage").mkdir(exist_ok=True)
    port = free_port()
    config = folder / "bgd.yml"
    config.write_text(_buildgrid_config(folder, port, instance, tls, reads_from), encoding="utf-8")
    scheme = "grpcs" if tls else "grpc"
    with _serving(
        [bgd, "server", "start", str(config)],
        folder,
        folder / "server.out",  # bgd logs to its output
        CacheServer(
            f"{scheme}://127.0.0.1:{port}/{instance}",
            port,
            (reads_from.blobs.parents[1] if reads_from else folder / "storage") / "cas" / "objects",
            folder / "server.out",
            "buildgrid",
        ),
    ) as server:
        yield server


def _nginx_config(
    folder: Path,
    port: int,
    tls: TlsFiles | None,
    users: dict[str, str] | None,
    headers: dict[str, str] | None,
    read_only: bool = False,
) -> str:
    listen = f"listen 127.0.0.1:{port}{' ssl' if tls else ''};"
    certs = f"ssl_certificate {tls.cert}; ssl_certificate_key {tls.key};" if tls else ""
    if tls is not None and tls.clients is not None:
        certs += f" ssl_client_certificate {tls.clients}; ssl_verify_client on;"
    auth = ""
    if users:
        # nginx reads {PLAIN} passwords: a test server needs no hashing.
        lines = "".join(f"{user}:{{PLAIN}}{password}\n" for user, password in users.items())
        (folder / "htpasswd").write_text(lines, encoding="utf-8")
        auth = f'auth_basic "cache"; auth_basic_user_file {folder / "htpasswd"};'
    for name, value in (headers or {}).items():  # e.g. a bearer token, an API key
        variable = "$http_" + name.lower().replace("-", "_")
        auth += f' if ({variable} != "{value}") {{ return 401; }}'
    temps = " ".join(
        f"{name}_temp_path {folder / 'tmp' / name};"
        for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    user = "user root;" if os.geteuid() == 0 else ""  # workers write where the test reads
    # Read-only: GET and HEAD served, a PUT answered 403.
    methods = "limit_except GET { deny all; }" if read_only else "dav_methods PUT;"
    return f"""
{user}
daemon off;
worker_processes 1;
pid {folder / "nginx.pid"};
error_log {folder / "error.log"} info;
events {{ worker_connections 64; }}
http {{
    access_log {folder / "access.log"};
    {temps}
    client_max_body_size 0;
    server {{
        {listen}
        {certs}
        root {folder / "data"};
        location / {{
            {auth}
            {methods}
            create_full_put_path on;
            dav_access user:rw group:r all:r;
        }}
    }}
}}
"""


@contextmanager
def running_nginx(
    folder: Path,
    *,
    prefix: str = "cache",
    tls: TlsFiles | None = None,
    users: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    read_only: bool = False,
) -> Iterator[CacheServer]:
    """nginx with WebDAV serving the HTTP cache protocol under `/prefix` on a free
    127.0.0.1 port (with Basic authentication for `users`; answering 401 to a request
    without each of `headers`; 403 to every PUT when `read_only`), stopped at the
    end. It serves `folder`/data: a symbolic link there serves another's."""
    nginx = nginx_binary()
    for name in ("data", "tmp"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = folder / "nginx.conf"
    config.write_text(_nginx_config(folder, port, tls, users, headers, read_only), encoding="utf-8")
    log = folder / "error.log"
    scheme = "https" if tls else "http"
    try:
        with _serving(
            [nginx, "-p", str(folder), "-c", str(config), "-e", str(log)],
            folder,
            folder / "server.out",
            CacheServer(
                f"{scheme}://127.0.0.1:{port}/{prefix}",
                port,
                folder / "data" / prefix / "cas",
                log,
                "nginx",
            ),
        ) as server:
            yield server
    finally:
        shutil.rmtree(folder / "tmp", ignore_errors=True)
