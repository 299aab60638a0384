"""A Python package index to publish wheels to: twine uploads, the simple API to check.

Upload goes through `python -m twine upload` (credentials in its environment, never
on the command line); existence checks and downloads use the PEP 503 simple page.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag, urljoin

import requests

from shipyard.errors import ShipyardError, UsageError

__all__ = ["PackageIndex", "PackageIndexError", "index_from_env"]


class PackageIndexError(ShipyardError):
    """The package index refused or failed an operation (exit 1)."""


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.links.append(href)


def _project(filename: str) -> str:
    """The normalised project name of a wheel file name (PEP 503)."""
    return re.sub(r"[-_.]+", "-", filename.split("-", 1)[0]).lower()


@dataclass
class PackageIndex:
    """An index: `url` receives uploads, `simple_url` serves the PEP 503 pages."""

    url: str
    username: str
    password: str
    simple_url: str = ""
    session: requests.Session = field(default_factory=requests.Session)

    def __post_init__(self) -> None:
        self.simple_url = self.simple_url or self.url.rstrip("/") + "/simple/"
        self.session.trust_env = False

    def check_credentials(self) -> None:
        """An upload with no file: a 401/403 means the credentials are refused, nothing lands."""
        try:
            resp = self.session.post(
                self.url,
                files={":action": (None, "file_upload"), "protocol_version": (None, "1")},
                auth=(self.username, self.password),
                timeout=30,
            )
        except requests.RequestException as exc:
            raise UsageError(f"package index {self.url} does not answer: {exc}") from None
        if resp.status_code in (401, 403):
            raise UsageError(
                f"package index {self.url} refused the credentials (HTTP {resp.status_code}); "
                "check SHIPYARD_INDEX_USER and SHIPYARD_INDEX_PASSWORD"
            )
        if resp.status_code >= 500:
            raise UsageError(f"package index {self.url} failed (HTTP {resp.status_code})")

    def find(self, filename: str) -> str | None:
        """The download URL of `filename` on the index, or None."""
        page = urljoin(self.simple_url, _project(filename) + "/")
        # Never follow a redirect: pypiserver and proxies send unknown projects to
        # another index, and what this index lacks is "not there", not a question
        # for somebody else's server.
        resp = self.session.get(page, timeout=30, allow_redirects=False)
        if resp.status_code == 404 or resp.is_redirect:
            return None
        if resp.status_code != 200:
            raise PackageIndexError(f"{page}: HTTP {resp.status_code}")
        parser = _Links()
        parser.feed(resp.text)
        for link in parser.links:
            url = urldefrag(urljoin(page, link))[0]
            if url.rsplit("/", 1)[-1] == filename:
                return url
        return None

    def sha256(self, filename: str) -> str | None:
        """The sha256 of `filename` as the index serves it, or None when it is not there."""
        url = self.find(filename)
        if url is None:
            return None
        digest = hashlib.sha256()
        with self.session.get(url, timeout=60, stream=True) as resp:
            if resp.status_code != 200:
                raise PackageIndexError(f"{url}: HTTP {resp.status_code}")
            for chunk in resp.iter_content(1 << 20):
                digest.update(chunk)
        return digest.hexdigest()

    def upload(self, path: Path) -> None:
        """Upload one file with twine; raise PackageIndexError with twine's output on failure."""
        env = {
            **os.environ,
            "TWINE_USERNAME": self.username,
            "TWINE_PASSWORD": self.password,
            "TWINE_NON_INTERACTIVE": "1",
        }
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "twine",
                "upload",
                "--non-interactive",
                "--disable-progress-bar",
                "--repository-url",
                self.url,
                str(path),
            ],
            capture_output=True,
            text=True,
            check=False,
            env=env,
        )
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
            raise PackageIndexError(
                f"twine upload of {path.name} to {self.url} failed: " + " | ".join(tail)
            )


def index_from_env(env: Mapping[str, str], url: str | None = None) -> PackageIndex | None:
    """The index from SHIPYARD_INDEX_URL/_USER/_PASSWORD (and _SIMPLE_URL), or None if no URL."""
    url = url or env.get("SHIPYARD_INDEX_URL")
    if not url:
        return None
    user, password = env.get("SHIPYARD_INDEX_USER"), env.get("SHIPYARD_INDEX_PASSWORD")
    if not user or not password:
        raise UsageError(
            "SHIPYARD_INDEX_URL is set but SHIPYARD_INDEX_USER or SHIPYARD_INDEX_PASSWORD is not"
        )
    return PackageIndex(url, user, password, env.get("SHIPYARD_INDEX_SIMPLE_URL", ""))
