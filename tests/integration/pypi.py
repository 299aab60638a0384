"""pypiserver on loopback, as the release, secrets and fault tests run it."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from tests.integration.registries import free_port

__all__ = ["PYPISERVER", "package_index"]

# pypiserver without bcrypt: its htpasswd check then takes the {SHA} entries written here.
PYPISERVER = (
    "import sys; sys.modules['bcrypt'] = None; "
    "from pypiserver.__main__ import main; sys.exit(main())"
)


@contextmanager
def package_index(folder: Path, user: str, password: str) -> Iterator[str]:
    """A pypiserver on a free 127.0.0.1 port serving `folder`/packages, taking uploads
    from `user` with `password`; yields its URL once it answers."""
    packages = folder / "packages"
    packages.mkdir(parents=True, exist_ok=True)
    sha1 = base64.b64encode(hashlib.sha1(password.encode()).digest()).decode()
    (folder / "htpasswd").write_text(f"{user}:{{SHA}}{sha1}\n")
    port = free_port()
    command = [sys.executable, "-c", PYPISERVER, "run", "-p", str(port), "-i", "127.0.0.1"]
    command += ["-a", "update", "-P", str(folder / "htpasswd"), "--hash-algo", "sha256"]
    command += ["--disable-fallback"]  # loopback only: never redirect to a public index
    with (folder / "log").open("wb") as log:
        process = subprocess.Popen([*command, str(packages)], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}/"
    try:
        with requests.Session() as session:
            session.trust_env = False  # no proxy from the environment: loopback only
            for _ in range(100):
                try:
                    session.get(url + "simple/", timeout=2)
                    break
                except requests.ConnectionError:
                    time.sleep(0.2)
            else:
                pytest.fail(f"pypiserver did not start: {(folder / 'log').read_text()}")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
