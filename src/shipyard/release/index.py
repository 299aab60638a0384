"""A Python package index to publish wheels to: twine uploads, the simple API to check.

Upload goes through `python -m twine upload` (credentials in its environment, never
on the command line); existence checks and downloads use the PEP 503 simple page.
The HTTP requests go through a `shipyard._http.transport.Client`, as the registry's
do: the same TLS, plain-HTTP and redirect checks, typed errors, and retry loop
(`Retrier`, which logs each retry with its reason on `shipyard._http.retry`).
Transient faults (no answer, a reset, a time-out, a body cut short, 429 and 5xx)
are retried within a `RetryPolicy`; twine's are too, through the same loop. An
upload that failed that way is looked up on the index before it is sent again,
since what was lost may only have been the answer. Plain HTTP is used only for a
loopback index, or with `insecure=True` (`$SHIPYARD_INDEX_INSECURE=1`): the
password would travel in clear. A private CA is trusted through `ca_file=` or
`$SHIPYARD_INDEX_CA_FILE`.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlsplit

import requests
from urllib3 import encode_multipart_formdata

from shipyard._environ import (
    INDEX_CA_FILE,
    INDEX_INSECURE,
    INDEX_PASSWORD,
    INDEX_SIMPLE_URL,
    INDEX_URL,
    INDEX_USER,
)
from shipyard._fs import sha256_file
from shipyard._http.errors import RemoteError
from shipyard._http.retry import TRANSIENT_STATUS, RetryPolicy
from shipyard._http.settings import ca_file_from, http_timeout
from shipyard._http.transport import Client
from shipyard._http.urls import is_loopback
from shipyard.errors import UsageError

__all__ = ["PackageIndex", "PackageIndexError", "index_from_env"]

INSECURE_VARIABLE = INDEX_INSECURE.name
CA_VARIABLE = INDEX_CA_FILE.name
_TWINE_STATUS = re.compile(r"HTTPError: (\d{3}) ")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# What twine prints when the connection broke rather than the index answering.
_TWINE_BROKEN = (
    "ConnectionError",
    "ChunkedEncodingError",
    "ContentDecodingError",
    "Timeout",
    "RemoteDisconnected",
    "Connection aborted",
    "Connection reset",
    "IncompleteRead",
)


def _private_copy(source: Path, copy: Path) -> str:
    """Copy the regular file `source` (never through a symlink) to `copy`, hashing the
    bytes as they are written; their sha256. PackageIndexError for anything else."""
    try:
        # O_NONBLOCK: a FIFO in its place must not hang the release (no effect on files).
        fd = os.open(
            source, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        )
    except OSError as exc:
        raise PackageIndexError("", "", f"{source}: cannot read it ({exc.strerror})") from None
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as handle, copy.open("xb") as out:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise PackageIndexError("", "", f"{source} is not a regular file")
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


class PackageIndexError(RemoteError):
    """The package index refused or failed an operation (exit 1)."""


@dataclass(frozen=True)
class _TwineFailure:
    """Why one twine run failed: the end of its output, the HTTP status, if it may pass."""

    detail: str
    status: int | None
    transient: bool

    @classmethod
    def from_output(cls, output: str) -> _TwineFailure:
        """Read twine's output: an HTTPError line names the status, else look for a broken link."""
        lines = [_ANSI.sub("", line).strip() for line in output.strip().splitlines()]
        detail = " | ".join(line for line in lines[-5:] if line)
        found = _TWINE_STATUS.search(output)
        if found:
            status = int(found.group(1))
            return cls(detail, status, status in TRANSIENT_STATUS)
        return cls(detail, None, any(marker in output for marker in _TWINE_BROKEN))


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
    """An index: `url` receives uploads, `simple_url` serves the PEP 503 pages.

    `timeout` bounds each wait for an answer (seconds); `retry` is the budget for
    transient faults; `insecure` allows plain HTTP to the index's hosts off
    loopback; `ca_file` is a private CA that signed the index's certificate.
    """

    url: str
    username: str
    password: str
    simple_url: str = ""
    session: requests.Session = field(default_factory=requests.Session)
    timeout: float = 30.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    insecure: bool = False
    ca_file: Path | None = None

    def __post_init__(self) -> None:
        self.simple_url = self.simple_url or self.url.rstrip("/") + "/simple/"
        hosts = []
        for url in dict.fromkeys((self.url, self.simple_url)):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise UsageError(f"package index URL {url!r} must be http(s)://HOST/...")
            if parts.scheme == "http" and not (self.insecure or is_loopback(parts.hostname or "")):
                raise UsageError(
                    f"package index {url}: plain HTTP would send the index password in clear "
                    f"to {parts.netloc}; use https://, or allow it with {INSECURE_VARIABLE}=1"
                )
            hosts.append(parts.netloc.rpartition("@")[2].lower())
        self.ca_file = ca_file_from({}, CA_VARIABLE, self.ca_file, f"package index {self.url}")
        self.session.trust_env = False
        self._http = Client(
            hosts[0],
            where="",
            server="the package index",
            insecure=self.insecure,
            insecure_hosts=frozenset(hosts) if self.insecure else frozenset(),
            insecure_hint=f"allow it with {INSECURE_VARIABLE}=1",
            ca_file=self.ca_file,
            trust_hint=f"set {CA_VARIABLE}=/path/to/ca.pem (its PEM certificate)",
            timeout=(self.timeout, self.timeout),
            retry=self.retry,
            session=self.session,
            error=PackageIndexError,
        )

    def check_credentials(self) -> None:
        """An upload with no file: a 401/403 means the credentials are refused, nothing lands."""
        op = f"check the credentials for {self.url}"
        form, content_type = encode_multipart_formdata(
            {":action": "file_upload", "protocol_version": "1"}
        )
        auth = (self.username, self.password)
        headers = {"Content-Type": content_type}

        def attempt() -> requests.Response:
            return self._http.exchange(
                "POST", self.url, op, headers=headers, body=lambda: form, auth=auth
            )

        try:
            resp = self._http.send(op, attempt)
        except PackageIndexError as exc:
            raise UsageError(f"package index {self.url} does not answer: {exc}") from None
        resp.close()
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
        op = f"read {page}"

        # Never follow a redirect: pypiserver and proxies send unknown projects to
        # another index, and what this index lacks is "not there", not a question
        # for somebody else's server. The body is read whole inside the attempt, so
        # a page cut short is asked for again rather than missing a link.
        def read() -> str | None:
            with self._http.settled(op, self._http.exchange("GET", page, op, follow=False)) as resp:
                if resp.status_code == 404 or resp.is_redirect:
                    return None
                if resp.status_code != 200:
                    raise PackageIndexError("", op, f"HTTP {resp.status_code}")
                return resp.text

        text = self._http.retrying(op, read)
        if text is None:
            return None
        parser = _Links()
        parser.feed(text)
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
        found, op = url, f"download {url}"

        def fetch() -> str:
            digest = hashlib.sha256()
            with self._http.settled(op, self._http.exchange("GET", found, op, stream=True)) as resp:
                if resp.status_code != 200:
                    raise PackageIndexError("", op, f"HTTP {resp.status_code}")
                for chunk in self._http.iter_body(op, resp):
                    digest.update(chunk)
            return digest.hexdigest()

        return self._http.retrying(op, fetch)

    def upload(self, path: Path, sha256: str | None = None) -> None:
        """Upload one file with twine, retrying transient failures; else PackageIndexError.

        With `sha256` (the digest a verified release gives the file), what is sent is
        a private copy whose digest was checked: the file cannot be swapped between
        the release's check and the upload. After a transient failure the index is
        asked for the file: if it has these very bytes the upload landed and only its
        answer was lost, so it is not sent again (an index refuses a second upload
        of a file name).
        """
        if sha256 is not None:
            with tempfile.TemporaryDirectory(prefix="shipyard-upload-") as private:
                copy = Path(private) / path.name
                found = _private_copy(path, copy)
                if found != sha256:
                    raise PackageIndexError(
                        "",
                        "",
                        f"{path} has sha256 {found}, not the {sha256} it was checked "
                        "with: it changed during the release; nothing was uploaded",
                    )
                self.upload(copy)
            return
        op = f"upload {path.name} to {self.url}"
        expected = sha256_file(path)
        tried = False

        def attempt() -> None:
            nonlocal tried
            if tried and self.sha256(path.name) == expected:
                return  # the failed attempt did land: only its answer was lost
            tried = True
            failure = self._twine(path)
            if failure is None:
                return
            if failure.status in (400, 409) and self.sha256(path.name) == expected:
                return  # "already exists", with the same bytes: an earlier attempt landed
            if not failure.transient:
                detail = f"twine upload of {path.name} to {self.url} failed: {failure.detail}"
                raise PackageIndexError("", "", detail)
            raise PackageIndexError("", op, failure.detail, transient=True)

        self._http.retrying(op, attempt)

    def _twine(self, path: Path) -> _TwineFailure | None:
        """Run twine once: None when it succeeded, else why it failed."""
        # Here, not at the top: promotion reads this module and loads no part of the engine.
        from shipyard.process import without_secrets

        env = {
            # twine is handed the index's credentials, and none of shipyard's others.
            **without_secrets(os.environ),
            "TWINE_USERNAME": self.username,
            "TWINE_PASSWORD": self.password,
            "TWINE_NON_INTERACTIVE": "1",
        }
        if is_loopback(urlsplit(self.url).hostname or ""):
            # A loopback index is never reached through a proxy from the environment.
            bypass = [env.get("NO_PROXY", ""), "127.0.0.1", "localhost", "::1"]
            env["NO_PROXY"] = env["no_proxy"] = ",".join(b for b in bypass if b)
        limit = max(300.0, 10 * self.timeout)  # twine sets no time-out of its own
        command = [
            sys.executable,
            "-m",
            "twine",
            "upload",
            "--non-interactive",
            "--disable-progress-bar",
            "--repository-url",
            self.url,
            str(path),
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, check=False, env=env, timeout=limit
            )
        except subprocess.TimeoutExpired:
            return _TwineFailure(f"twine did not finish within {limit:.0f} s", None, True)
        if done.returncode == 0:
            return None
        return _TwineFailure.from_output(done.stdout + done.stderr)


def index_from_env(env: Mapping[str, str], url: str | None = None) -> PackageIndex | None:
    """The index from SHIPYARD_INDEX_URL/_USER/_PASSWORD (and _SIMPLE_URL), or None if no URL."""
    url = url or env.get(INDEX_URL.name)
    if not url:
        return None
    user, password = env.get(INDEX_USER.name), env.get(INDEX_PASSWORD.name)
    if not user or not password:
        raise UsageError(
            f"{INDEX_URL.name} is set but {INDEX_USER.name} or {INDEX_PASSWORD.name} is not"
        )
    return PackageIndex(
        url,
        user,
        password,
        env.get(INDEX_SIMPLE_URL.name, ""),
        timeout=http_timeout(env, (30.0, 30.0))[1],
        insecure=env.get(INSECURE_VARIABLE) == "1",
        ca_file=ca_file_from(env, CA_VARIABLE, None, f"package index {url}"),
    )
