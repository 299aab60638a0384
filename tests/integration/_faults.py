"""Shared by the fault tests (test_faults*.py): budgets, clients, the pypiserver, wheels.

Registry, remote cache, package index and a whole release through a faulty network:
every test talks to a real service (the shared registry, a pypiserver) through
`faultproxy.FaultProxy`, which spoils a seeded share of the requests with resets
(of the upload and of the answer), 500/502/503, 429 with Retry-After, stalls past
the client's time-out and answers cut short. What lands must be byte for byte
what a fault-free run produces; every retry must be logged with its reason and
stay within the retry budget; answers that no retry can change (401, 403, 404 on a
manifest, 400 DIGEST_INVALID) must fail after one request with a clear message.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import uuid
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from shipyard._fs import sha256_file
from shipyard._http.retry import DEFAULT_ATTEMPTS, RetryPolicy
from shipyard.oci.remote.registry import (
    Registry,
)
from shipyard.release import (
    PackageIndex,
)
from tests.integration._release import (
    INDEX_PASSWORD,
    INDEX_USER,
)
from tests.integration.faultproxy import FAULT_KINDS, FaultProxy
from tests.integration.pypi import package_index

RUN = uuid.uuid4().hex[:8]

SERIAL = int(RUN[:6], 16)  # a number for wheel versions, unique to this run

RATE = 0.25  # a quarter of all requests fail: far worse than any real network

TIMEOUT = 1.0  # SHIPYARD_HTTP_TIMEOUT in these tests

STALL = 1.8  # a stalled answer stays away longer than TIMEOUT

# Attempts per operation: the default budget, sized in shipyard/oci/_retry.py so that
# a whole release at RATE fails in fewer than 1 of 1,000 runs.
ATTEMPTS = DEFAULT_ATTEMPTS

# Fault seeds per test: a few in the normal run, SHIPYARD_FAULT_SEEDS (50 in
# `nox -s reliability`) for the figures in docs/reliability.md.
SEEDS = max(1, int(os.environ.get("SHIPYARD_FAULT_SEEDS", "2")))

# A short time cap for the "never clears" tests: stalls and Retry-After hit it first.
CAP = 6.0

PLATFORMS = ("linux/amd64", "linux/arm64")

CHUNK = 24 << 10  # blobs over 32 KiB go up in PATCH chunks of 24 KiB

LOGGERS = ("shipyard._http.retry",)  # the one retry loop of the registry and index clients

RETRY_LINE = re.compile(r": retry (\d+) of (\d+) in [\d.]+ s after: (.+)$")


def fast_retry(attempts: int = ATTEMPTS, deadline: float = 60.0) -> RetryPolicy:
    """The default budget with short pauses, so faults cost the tests little time.

    The 60 s cap fits ATTEMPTS stalls of TIMEOUT each and every pause (16 * 1 + 5.5 s).
    """
    return RetryPolicy(attempts=attempts, base_delay=0.05, max_delay=0.4, deadline=deadline)


def client_env() -> dict[str, str]:
    """A client environment: short time-out, no docker credentials."""
    return {"SHIPYARD_HTTP_TIMEOUT": str(TIMEOUT), "DOCKER_CONFIG": "/nonexistent"}


def faulty_registry(proxy: FaultProxy, retry: RetryPolicy | None = None) -> Registry:
    """A client of the registry behind `proxy`, chunking blobs over 32 KiB."""
    return Registry(
        proxy.host,
        retry=retry or fast_retry(),
        environ=client_env(),
        chunk_size=CHUNK,
        chunk_threshold=32 << 10,
    )


def only(registry: Registry) -> Callable[[str], Registry]:
    """A Publisher's client factory that always hands out `registry`."""
    return lambda _host: registry


def retry_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, int, str]]:
    """(retry number, retries allowed, reason) of every retry shipyard logged."""
    found = []
    for rec in caplog.records:
        if rec.name in LOGGERS and (match := RETRY_LINE.search(rec.getMessage())):
            found.append((int(match[1]), int(match[2]), match[3]))
    return found


def describe(injected: Counter[str]) -> str:
    """`kind n, kind n, ...` in FAULT_KINDS order, then forced answers."""
    order = [k for k in FAULT_KINDS if injected[k]] + sorted(set(injected) - set(FAULT_KINDS))
    return ", ".join(f"{kind} {injected[kind]}" for kind in order)


def worst_single(caplog: pytest.LogCaptureFixture) -> int:
    """The most retries any one request needed (the highest retry number logged)."""
    return max((number for number, _, _ in retry_lines(caplog)), default=0)


def check_retries(caplog: pytest.LogCaptureFixture, retries: int, faults: int) -> list[str]:
    """Problems with the logged retries: one line per retry, each with a reason, in budget."""
    lines = retry_lines(caplog)
    problems = []
    if len(lines) != retries:
        problems.append(f"{retries} retries counted, {len(lines)} logged")
    if not faults <= retries <= 2 * faults:
        problems.append(f"{faults} faults cost {retries} retries")
    for number, allowed, reason in lines:
        if not reason.strip() or number > allowed or allowed != ATTEMPTS - 1:
            problems.append(f"retry {number} of {allowed} after {reason!r}")
    return problems


def pull_back(registry: Registry, repo: str, tag: str, dest: Path) -> str:
    """Copy `repo:tag` (an index) into an OCI layout at `dest`; return the root digest."""
    data, media_type, root = registry.get_manifest(repo, tag)
    blobs = dest / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    (blobs / root.removeprefix("sha256:")).write_bytes(data)
    for entry in json.loads(data)["manifests"]:
        child, _, digest = registry.get_manifest(repo, entry["digest"])
        (blobs / digest.removeprefix("sha256:")).write_bytes(child)
        doc = json.loads(child)
        for desc in [doc["config"], *doc["layers"]]:
            target = blobs / desc["digest"].removeprefix("sha256:")
            if not target.exists():
                registry.pull_blob(repo, desc["digest"], target, size=desc["size"])
    (dest / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    top = {"mediaType": media_type, "digest": root, "size": len(data)}
    (dest / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
    return root


def blob_digests(layout: Path) -> dict[str, str]:
    """File name -> sha256 of every blob of a layout."""
    return {p.name: sha256_file(p) for p in sorted((layout / "blobs" / "sha256").iterdir())}


@dataclass(frozen=True)
class PackageServer:
    """A running pypiserver: where it listens and where its files land."""

    url: str
    host: str
    packages: Path


@contextmanager
def running_pypiserver(folder: Path) -> Iterator[PackageServer]:
    """pypiserver on a free 127.0.0.1 port, as tests/integration/_release.py runs it."""
    with package_index(folder, INDEX_USER, INDEX_PASSWORD) as url:
        yield PackageServer(url, urlsplit(url).netloc, folder / "packages")


@pytest.fixture(scope="module")
def pypiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PackageServer]:
    with running_pypiserver(tmp_path_factory.mktemp("pypiserver")) as server:
        yield server


def make_wheel(folder: Path, name: str, version: str, payload: bytes) -> Path:
    """A minimal valid pure-Python wheel twine accepts."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": payload,
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: faults\n"
        ).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: faults\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    lines = []
    for entry, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{entry},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = ("\n".join([*lines, f"{info}/RECORD,,"]) + "\n").encode()
    path = folder / f"{name}-{version}-py3-none-any.whl"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for entry, data in files.items():
            archive.writestr(zipfile.ZipInfo(entry, (2020, 1, 1, 0, 0, 0)), data)
    return path


def faulty_index(proxy: FaultProxy, attempts: int = ATTEMPTS) -> PackageIndex:
    return PackageIndex(
        proxy.url, INDEX_USER, INDEX_PASSWORD, timeout=TIMEOUT, retry=fast_retry(attempts)
    )
