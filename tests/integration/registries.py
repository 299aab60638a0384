"""Extra CNCF distribution registries for the registry client's tests.

Each runs `docker-registry serve CONFIG` on a free 127.0.0.1 port with its
storage, config and log in a temporary folder: one plain, one asking for basic
authentication (an htpasswd file with a bcrypt hash, from `htpasswd -B` when
apache2-utils is installed, else from the `bcrypt` Python package), one serving
TLS with a certificate from a CA made here (the `cryptography` package), and one
using docker's token authentication, with a small token server run here that
signs ES256 JWTs for the scopes asked, after checking basic credentials.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import requests

__all__ = [
    "ExtraRegistries",
    "ExtraRegistry",
    "TokenIssuer",
    "extra_registries",
    "make_certificates",
    "registry_binary",
    "write_htpasswd",
]

USER = "shipyard-ci"
PASSWORD = "correct-horse-battery-staple-42"
START_SECONDS = 30.0


@dataclass(frozen=True)
class ExtraRegistry:
    """One running registry: where it listens and what a client needs to use it."""

    host: str
    root: Path
    log: Path
    ca_file: Path | None = None
    username: str | None = None
    password: str | None = None
    token_requests: list[dict[str, list[str]]] = field(default_factory=list)


@dataclass(frozen=True)
class ExtraRegistries:
    """The plain, basic-auth, TLS and token-auth registries; which tool hashed the password."""

    plain: ExtraRegistry
    basic: ExtraRegistry
    tls: ExtraRegistry
    token: ExtraRegistry
    htpasswd_tool: str


def registry_binary() -> str | None:
    """The CNCF distribution registry program (Debian's docker-registry), if installed."""
    return shutil.which("docker-registry") or shutil.which("registry")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_htpasswd(path: Path, user: str, password: str) -> str:
    """Write an htpasswd file with a bcrypt hash; return the tool that made it."""
    htpasswd = shutil.which("htpasswd")
    if htpasswd is not None:
        subprocess.run(
            [htpasswd, "-B", "-C", "5", "-c", "-i", str(path), user],
            input=password,
            text=True,
            check=True,
            capture_output=True,
        )
        return "htpasswd -B (apache2-utils)"
    import bcrypt

    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()
    path.write_text(f"{user}:{hashed}\n", encoding="utf-8")
    return "bcrypt (Python package)"


def make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 and localhost: (ca, cert, key) PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "shipyard test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_path, cert_path, key_path = folder / "ca.crt", folder / "server.crt", folder / "server.key"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca_path, cert_path, key_path


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class TokenIssuer:
    """A token service for docker's token authentication: ES256 JWTs with an x5c chain."""

    service = "shipyard-test-registry"
    issuer = "shipyard-test-issuer"

    def __init__(self, folder: Path, user: str, password: str) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.issuer)])
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .sign(self._key, hashes.SHA256())
        )
        self._chain = [base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()]
        self.bundle = folder / "token-signer.crt"
        self.bundle.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self._basic = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.requests: list[dict[str, list[str]]] = []
        # The actions a token may grant; drop "push" for a read-only account.
        self.allowed: set[str] = {"pull", "push", "delete", "*"}

    def answer(self, query: dict[str, list[str]], authorization: str | None) -> tuple[int, bytes]:
        """The token endpoint: 401 without the right basic credentials, else a signed JWT."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

        self.requests.append(query)
        if authorization != self._basic:
            return 401, b'{"details":"bad credentials"}'
        access = []
        for scope in query.get("scope", []):
            kind, name, actions = scope.split(":", 2)
            granted = [a for a in actions.split(",") if a in self.allowed]
            access.append({"type": kind, "name": name, "actions": granted})
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "sub": "shipyard-ci",
            "aud": self.service,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": _b64url(now.to_bytes(8, "big")) + str(len(self.requests)),
            "access": access,
        }
        header = {"typ": "JWT", "alg": "ES256", "x5c": self._chain}
        signing_input = (
            f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        )
        r, s = decode_dss_signature(
            self._key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        )
        signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        token = f"{signing_input}.{_b64url(signature)}"
        return 200, json.dumps({"token": token, "expires_in": 300}).encode()


@contextmanager
def running_token_server(issuer: TokenIssuer) -> Iterator[str]:
    """Serve `issuer` at http://127.0.0.1:PORT/token until the block ends; yield the realm."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            status, body = issuer.answer(parse_qs(parts.query), self.headers.get("Authorization"))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/token"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _config(root: Path, port: int, extra: str) -> str:
    return f"""\
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
  secret: shipyard-test-only
{extra}"""


def _wait_until_serving(process: subprocess.Popen[bytes], url: str, verify: bool | str) -> bool:
    deadline = time.monotonic() + START_SECONDS
    with requests.Session() as session:
        session.trust_env = False  # loopback only, never through a proxy
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return False
            try:
                session.get(url, timeout=2, verify=verify).close()
                return True
            except requests.RequestException:
                time.sleep(0.1)
    return False


@contextmanager
def running_registry(
    folder: Path,
    *,
    tls: tuple[Path, Path, Path] | None = None,
    htpasswd: Path | None = None,
    token: tuple[TokenIssuer, str] | None = None,
) -> Iterator[ExtraRegistry]:
    """Run one registry in `folder` until the block ends; it is stopped even on failure."""
    binary = registry_binary()
    if binary is None:
        raise RuntimeError("docker-registry is not installed (apt-get install docker-registry)")
    folder.mkdir(parents=True, exist_ok=True)
    extra = ""
    if tls is not None:
        extra += f"  tls:\n    certificate: {tls[1]}\n    key: {tls[2]}\n"
    if htpasswd is not None:
        extra += f"auth:\n  htpasswd:\n    realm: shipyard-test\n    path: {htpasswd}\n"
    if token is not None:
        issuer, realm = token
        extra += (
            f"auth:\n  token:\n    realm: {realm}\n    service: {issuer.service}\n"
            f"    issuer: {issuer.issuer}\n    rootcertbundle: {issuer.bundle}\n"
        )
    log = folder / "registry.log"
    for _ in range(3):  # another process may take the free port before the registry does
        port = free_port()
        config = folder / "config.yml"
        config.write_text(_config(folder / "data", port, extra), encoding="utf-8")
        with log.open("ab") as out:
            process = subprocess.Popen(
                [binary, "serve", str(config)], stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )
        try:
            scheme = "https" if tls else "http"
            verify: bool | str = str(tls[0]) if tls else True
            if _wait_until_serving(process, f"{scheme}://127.0.0.1:{port}/v2/", verify):
                yield ExtraRegistry(
                    host=f"127.0.0.1:{port}",
                    root=folder,
                    log=log,
                    ca_file=tls[0] if tls else None,
                    username=USER if htpasswd or token else None,
                    password=PASSWORD if htpasswd or token else None,
                    token_requests=token[0].requests if token else [],
                )
                return
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
    raise RuntimeError(f"the registry in {folder} did not start; see {log}")


@contextmanager
def extra_registries(folder: Path) -> Iterator[ExtraRegistries]:
    """Start the plain, basic-auth and TLS registries under `folder`; stop them afterwards."""
    htpasswd = folder / "htpasswd"
    folder.mkdir(parents=True, exist_ok=True)
    tool = write_htpasswd(htpasswd, USER, PASSWORD)
    certs = folder / "certs"
    certs.mkdir()
    with ExitStack() as stack:
        plain = stack.enter_context(running_registry(folder / "plain"))
        basic = stack.enter_context(running_registry(folder / "basic", htpasswd=htpasswd))
        tls = stack.enter_context(running_registry(folder / "tls", tls=make_certificates(certs)))
        issuer = TokenIssuer(certs, USER, PASSWORD)
        realm = stack.enter_context(running_token_server(issuer))
        token = stack.enter_context(running_registry(folder / "token", token=(issuer, realm)))
        yield ExtraRegistries(plain=plain, basic=basic, tls=tls, token=token, htpasswd_tool=tool)
