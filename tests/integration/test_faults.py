"""Registry, remote cache, package index and a whole release through a faulty network.

Every test here talks to a real service (the shared registry, a pypiserver) through
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
import logging
import os
import random
import re
import time
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
from shipyard.engine.cache.remote import RemoteCache
from shipyard.engine.scheduler import Artifact
from shipyard.errors import ShipyardError, UsageError
from shipyard.oci.remote.push import Publisher, read_layout_image
from shipyard.oci.remote.registry import (
    MEDIA_OCI_MANIFEST,
    AuthError,
    NotFound,
    Registry,
    RegistryError,
)
from shipyard.release import (
    PackageIndex,
    PackageIndexError,
    ReleaseOptions,
    prepare_release,
    release,
)
from shipyard.release.index import _TwineFailure
from tests.integration.conftest import Services
from tests.integration.faultproxy import FAULT_KINDS, FaultProxy, running_proxy
from tests.integration.pypi import package_index
from tests.integration.test_push import make_layout
from tests.integration.test_release import (
    BUILDERS,
    INDEX_PASSWORD,
    INDEX_USER,
    make_repo,
)
from tests.reliability import record

pytestmark = [
    pytest.mark.integration,
    pytest.mark.reliability,
    pytest.mark.requires("registry"),
]

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
LOGGERS = ("shipyard._http.transport", "shipyard.release.index")
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


# -- images -------------------------------------------------------------------------------


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


def test_push_and_pull_a_multi_platform_image_through_faults(
    services: Services, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    layout = tmp_path / "img"
    shared = random.Random(7).randbytes(96 << 10)  # 4 chunks of 24 KiB
    make_layout(layout, PLATFORMS, "faults", shared=shared)
    image = read_layout_image(layout)

    # The fault-free run: straight to the registry, and back.
    clean = Registry(services.registry, environ=client_env())
    clean_hub = f"{services.registry}/faults-clean-{RUN}"
    [clean_result] = Publisher(only(clean)).push("app", image, [clean_hub], ["1.0", "latest"])
    clean_root = pull_back(clean, f"faults-clean-{RUN}/app", "1.0", tmp_path / "clean")

    seeds = tuple(range(11, 11 + SEEDS))
    injected: Counter[str] = Counter()
    requests_seen = retries = resumed = worst_run = 0
    problems: list[str] = []
    started = time.monotonic()
    for seed in seeds:
        with running_proxy(services.registry, rate=RATE, seed=seed, stall_seconds=STALL) as proxy:
            registry = faulty_registry(proxy)
            hub = f"{proxy.host}/faults-{seed}-{RUN}"
            back = tmp_path / f"back-{seed}"
            try:
                [result] = Publisher(only(registry)).push("app", image, [hub], ["1.0", "latest"])
                root = pull_back(registry, f"faults-{seed}-{RUN}/app", "latest", back)
            except RegistryError as exc:
                problems.append(f"seed {seed}: {exc}")
            else:
                if (result.digest, root) != (clean_result.digest, clean_root):
                    problems.append(f"seed {seed}: pushed {result.digest}, pulled {root}")
                if blob_digests(back) != blob_digests(layout):
                    problems.append(f"seed {seed}: the pulled layout differs from the pushed one")
                for tag in ("1.0", "latest"):
                    found = clean.manifest_exists(f"faults-{seed}-{RUN}/app", tag)
                    if found != clean_result.digest:
                        problems.append(f"seed {seed}: tag {tag} is {found}")
            injected += proxy.injected
            requests_seen += proxy.requests
            retries += registry.stats.retries
            worst_run = max(worst_run, registry.stats.retries)
            resumed += proxy.count("GET", "/blobs/uploads/")
            assert proxy.rewritten, "the registry's Location headers went through the rewriter"
    seconds = time.monotonic() - started
    survived = len(seeds) - len({p.split(":")[0] for p in problems})
    problems += check_retries(caplog, retries, sum(injected.values()))
    if set(injected) != set(FAULT_KINDS):
        problems.append(f"not every kind of fault was injected: {describe(injected)}")
    worst = worst_single(caplog)
    record(
        "image push and pull through a faulty proxy",
        area="retry budget",
        cases=len(seeds),
        injected=f"{sum(injected.values())} faults in {requests_seen} requests over "
        f"{len(seeds)} fault seeds at {RATE:.0%} ({describe(injected)})",
        result=f"{survived}/{len(seeds)} "
        f"pushes of a {len(PLATFORMS)}-platform image ({len(image.blobs)} blobs, one chunked) "
        f"and pulls back survived with digests equal to a fault-free run; {retries} retries, "
        f"all logged with their reason, at most {worst} for one request and {worst_run} for "
        f"one run ({ATTEMPTS} attempts allowed); {resumed} chunked uploads resumed mid-way; "
        f"{seconds:.1f}s",
        figures={
            "seeds": len(seeds),
            "successes": survived,
            "requests": requests_seen,
            "faults": sum(injected.values()),
            "retries": retries,
            "worst_retries_one_request": worst,
            "worst_retries_one_run": worst_run,
            "attempts_allowed": ATTEMPTS,
            "resumed_uploads": resumed,
            "seconds": round(seconds, 1),
        },
    )
    assert not problems, "\n".join(problems)


def test_remote_cache_through_faults(
    services: Services, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    rng = random.Random(21)
    work = tmp_path / "work"
    actions: dict[str, tuple[Artifact, ...]] = {}
    for number in range(3):
        made: list[Artifact] = []
        for name in ("out.whl", "app.pyz"):
            path = work / "dist" / f"action{number}" / name  # restored only under dist/
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(rng.randbytes(rng.randint(100, 40 << 10)))
            made.append(Artifact(path, sha256_file(path), path.stat().st_size))
        actions[f"key-{number}-{RUN}"] = tuple(made)

    clean = RemoteCache(Registry(services.registry, environ=client_env()), f"faults-cc-{RUN}")
    for key, outputs in actions.items():
        clean.store(key, outputs, work)

    problems: list[str] = []
    started = time.monotonic()
    with running_proxy(services.registry, rate=RATE, seed=31, stall_seconds=STALL) as proxy:
        registry = faulty_registry(proxy)
        cache = RemoteCache(registry, f"faults-cache-{RUN}")
        for key, outputs in actions.items():
            cache.store(key, outputs, work)
        for key, outputs in actions.items():
            restored = cache.restore(key, tmp_path / "restored")
            got = {(a.path.relative_to(tmp_path / "restored"), a.sha256) for a in restored or ()}
            want = {(a.path.relative_to(work), a.sha256) for a in outputs}
            if got != want:
                problems.append(f"{key}: restored {sorted(got)}, stored {sorted(want)}")
            for artifact in restored or ():
                if sha256_file(artifact.path) != artifact.sha256:
                    problems.append(f"{key}: {artifact.path} has other bytes")
            tagged = clean.registry.manifest_exists(f"faults-cache-{RUN}", key)
            if tagged != clean.registry.manifest_exists(f"faults-cc-{RUN}", key):
                problems.append(f"{key}: the manifest differs from the fault-free run's")
        if cache.restore(f"missing-{RUN}", tmp_path / "none") is not None:
            problems.append("a missing key was restored")
    seconds = time.monotonic() - started
    problems += check_retries(caplog, registry.stats.retries, proxy.faults)
    record(
        "remote cache put and get through a faulty proxy",
        area="network",
        cases=proxy.requests,
        injected=f"{proxy.faults} faults in {proxy.requests} requests ({describe(proxy.injected)})",
        result=f"{len(actions)} actions stored and restored, {len(problems)} problems; "
        f"manifests equal to a fault-free run's; {registry.stats.retries} retries, all "
        f"logged; {seconds:.1f}s",
        figures={
            "requests": proxy.requests,
            "faults": proxy.faults,
            "retries": registry.stats.retries,
            "seconds": round(seconds, 1),
        },
    )
    assert not problems, "\n".join(problems)


# -- package index ------------------------------------------------------------------------


@dataclass(frozen=True)
class PackageServer:
    """A running pypiserver: where it listens and where its files land."""

    url: str
    host: str
    packages: Path


@contextmanager
def running_pypiserver(folder: Path) -> Iterator[PackageServer]:
    """pypiserver on a free 127.0.0.1 port, as tests/integration/test_release.py runs it."""
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


def test_wheel_upload_and_query_through_faults(
    pypiserver: PackageServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    rng = random.Random(41)
    wheels = [
        make_wheel(tmp_path, "fault_demo", f"1.{n}.{SERIAL}", rng.randbytes(20 << 10))
        for n in range(4)
    ]
    direct = PackageIndex(pypiserver.url, INDEX_USER, INDEX_PASSWORD)
    problems: list[str] = []
    started = time.monotonic()
    with running_proxy(pypiserver.host, rate=RATE, seed=43, stall_seconds=STALL) as proxy:
        index = faulty_index(proxy)
        index.check_credentials()
        for wheel in wheels:
            if index.sha256(wheel.name) is not None:
                problems.append(f"{wheel.name} is on the index before its upload")
            index.upload(wheel)
            expected = sha256_file(wheel)
            served = index.sha256(wheel.name)
            landed = sha256_file(pypiserver.packages / wheel.name)
            if {served, landed, direct.sha256(wheel.name)} != {expected}:
                problems.append(f"{wheel.name}: served {served}, stored {landed}, made {expected}")
        if index.find(f"fault_demo-9.9.{SERIAL}-py3-none-any.whl") is not None:
            problems.append("a file never uploaded was found")
    seconds = time.monotonic() - started
    stored = sorted(p.name for p in pypiserver.packages.glob("fault_demo-*"))
    if stored != sorted(w.name for w in wheels):
        problems.append(f"the index holds {stored}")
    lines = retry_lines(caplog)
    if proxy.faults and not lines:
        problems.append(f"{proxy.faults} faults and no retry logged")
    if any(not reason.strip() or number > allowed for number, allowed, reason in lines):
        problems.append(f"retries out of budget or without a reason: {lines}")
    uploads = proxy.count("POST", "/") - 1  # less the credentials check
    record(
        "wheel upload and query through a faulty proxy to pypiserver",
        area="network",
        cases=proxy.requests,
        injected=f"{proxy.faults} faults in {proxy.requests} requests ({describe(proxy.injected)})",
        result=f"{len(wheels)} wheels uploaded with twine ({uploads} POSTs) and read back, "
        f"sha256 equal to the built files, none stored twice, {len(problems)} problems; "
        f"{len(lines)} retries logged; {seconds:.1f}s",
        figures={
            "requests": proxy.requests,
            "faults": proxy.faults,
            "retries": len(lines),
            "uploads": uploads,
            "seconds": round(seconds, 1),
        },
    )
    assert not problems, "\n".join(problems)


def test_twine_failures_are_told_apart() -> None:
    """What twine prints decides between retrying and failing at once."""
    cases = {
        "\x1b[31mERROR   \x1b[0m HTTPError: 503 Service Unavailable from http://i/": (503, True),
        "ERROR    HTTPError: 429 Too Many Requests from http://i/": (429, True),
        "ERROR    HTTPError: 409 Conflict from http://i/\n File already exists": (409, False),
        "ERROR    HTTPError: 403 Forbidden from http://i/": (403, False),
        "requests.exceptions.ConnectionError: ('Connection aborted.', "
        "ConnectionResetError(104, 'Connection reset by peer'))": (None, True),
        "requests.exceptions.ChunkedEncodingError: ('Connection broken: "
        "IncompleteRead(0 bytes read, 64 more expected)')": (None, True),
        "ERROR    InvalidDistribution: Invalid distribution metadata": (None, False),
    }
    told = 0
    for output, (status, transient) in cases.items():
        failure = _TwineFailure.from_output(output)
        told += (failure.status, failure.transient) == (status, transient)
        assert "\x1b" not in failure.detail
    record(
        "twine failures told apart",
        area="network",
        cases=len(cases),
        injected="twine output for 503, 429, 409, 403, a reset, a body cut short, bad metadata",
        result=f"{told}/{len(cases)} classified right: 429/5xx and broken connections are "
        "retried, 4xx and bad metadata fail at once",
        figures={"cases": len(cases), "right": told},
    )
    assert told == len(cases)


# -- a whole release -----------------------------------------------------------------------


def release_once(
    services: Services,
    pypiserver: PackageServer,
    repo: Path,
    seed: int,
    caplog: pytest.LogCaptureFixture,
) -> tuple[list[str], Counter[str], int, int]:
    """One release of `repo` through faulty proxies seeded with `seed`.

    Returns the problems found, the faults injected, the requests seen and the
    retries logged.
    """
    version = f"1.0.{seed}"
    logged = len(retry_lines(caplog))
    with (
        running_proxy(services.registry, rate=RATE, seed=seed, stall_seconds=STALL) as hub,
        running_proxy(pypiserver.host, rate=RATE, seed=seed + 1, stall_seconds=STALL) as pypi,
    ):
        env = {
            **os.environ,
            **client_env(),
            "HUB_A": f"{hub.host}/rel-faults-a{seed}-{RUN}",
            "HUB_B": f"{hub.host}/rel-faults-b{seed}-{RUN}",
            "SHIPYARD_INDEX_URL": pypi.url,
            "SHIPYARD_INDEX_USER": INDEX_USER,
            "SHIPYARD_INDEX_PASSWORD": INDEX_PASSWORD,
        }
        ctx = prepare_release(
            repo / "binaries.yaml",
            ReleaseOptions(version=version),
            env=env,
            builders=BUILDERS,
            registry_for=lambda host: Registry(host, retry=fast_retry(), environ=env),
            index=faulty_index(pypi),
        )
        failed = False
        try:
            release(ctx)
        except ShipyardError:
            failed = True  # the stage and its error are in ctx.results
    injected = hub.injected + pypi.injected
    requests_seen = hub.requests + pypi.requests
    retries = len(retry_lines(caplog)) - logged
    problems = [f"{r.name}: {r.status} {r.reason}" for r in ctx.results if r.status != "ran"]
    if failed:
        return [f"seed {seed}: {p}" for p in problems], injected, requests_seen, retries
    staged = json.loads((repo / "dist" / "release" / version / "release.json").read_text())
    clean = Registry(services.registry, environ=client_env())
    for art in staged["artifacts"]:
        if art["kind"] == "image":
            for prefix in ("a", "b"):
                for tag in art["tags"]:
                    repository = f"rel-faults-{prefix}{seed}-{RUN}/{art['binary']}"
                    found = clean.manifest_exists(repository, tag)
                    if found != art["digest"]:
                        problems.append(f"{repository}:{tag} is {found}, staged {art['digest']}")
        if art["kind"] == "wheel":
            landed = pypiserver.packages / Path(art["path"]).name
            if not landed.is_file() or sha256_file(landed) != art["sha256"]:
                problems.append(f"{landed.name} did not land as staged")
    if sum(injected.values()) and not retries:
        problems.append(f"{sum(injected.values())} faults and no retry logged")
    return (
        [f"seed {seed}: {p}" for p in problems],
        hub.injected + pypi.injected,
        requests_seen,
        retries,
    )


def test_release_through_faults(
    services: Services,
    pypiserver: PackageServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    repo = make_repo(tmp_path / "repo")
    seeds = tuple(range(51, 51 + 2 * SEEDS, 2))
    started = time.monotonic()
    problems: list[str] = []
    injected: Counter[str] = Counter()
    requests_seen = retries = worst_run = 0
    for seed in seeds:
        found, faults, seen, logged = release_once(services, pypiserver, repo, seed, caplog)
        problems += found
        injected += faults
        requests_seen += seen
        retries += logged
        worst_run = max(worst_run, logged)
    seconds = time.monotonic() - started
    survived = len(seeds) - len({p.split(":")[0] for p in problems})
    worst = worst_single(caplog)
    faults_total = sum(injected.values())
    record(
        "whole release through faulty proxies (2 hubs, pypiserver)",
        area="retry budget",
        cases=len(seeds),
        injected=f"{faults_total} faults in {requests_seen} requests over {len(seeds)} fault "
        f"seeds at {RATE:.0%} ({describe(injected)})",
        result=f"{survived}/{len(seeds)} releases survived: preflight to verify ran, every tag "
        f"on both hubs and every wheel equal to release.json; {retries} retries logged in all, "
        f"at most {worst} for one request and {worst_run} for one release ({ATTEMPTS} attempts "
        f"allowed); {seconds:.1f}s",
        figures={
            "seeds": len(seeds),
            "successes": survived,
            "requests": requests_seen,
            "faults": faults_total,
            "retries": retries,
            "worst_retries_one_request": worst,
            "worst_retries_one_run": worst_run,
            "attempts_allowed": ATTEMPTS,
            "seconds": round(seconds, 1),
        },
    )
    assert not problems, "\n".join(problems)


# -- bounded, logged, and fail-fast -------------------------------------------------------


@pytest.fixture(scope="module")
def tagged_image(services: Services, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A repository on the shared registry with a small image tagged `t`."""
    layout = tmp_path_factory.mktemp("tagged") / "img"
    make_layout(layout, ("linux/amd64",), "tagged")
    clean = Registry(services.registry, environ=client_env())
    Publisher(only(clean)).push("app", layout, [f"{services.registry}/faults-{RUN}"], ["t"])
    return f"faults-{RUN}/app"


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_a_fault_that_never_clears_gives_up_in_bounded_time(
    services: Services, tagged_image: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The default number of attempts, or the time cap when faults cost time, ends it."""
    caplog.set_level(logging.WARNING)
    repo = tagged_image
    options = {"rate": 1.0, "kinds": (kind,), "stall_seconds": STALL, "seed": 1}
    # The default attempts with short pauses (0.01 s doubling to 0.1 s: 1.3 s in all)
    # and a time cap of CAP seconds: quick faults spend the attempts, stalls (TIMEOUT
    # each) and Retry-After (1 s each) reach the cap first.
    policy = RetryPolicy(attempts=ATTEMPTS, base_delay=0.01, max_delay=0.1, deadline=CAP)
    with running_proxy(services.registry, **options) as proxy:
        registry = faulty_registry(proxy, policy)
        started = time.monotonic()
        with pytest.raises(RegistryError) as caught:
            registry.get_manifest(repo, "t")
        seconds = time.monotonic() - started
        sent = proxy.count("GET", "/manifests/t")
    lines = retry_lines(caplog)
    message = str(caught.value)
    slow = kind in ("stall", "status-429")
    # The cap is checked before each pause; the last attempt may then take a time-out.
    bound = CAP + TIMEOUT + 1.0
    record(
        f"a {kind} fault on every request",
        area="network",
        cases=sent,
        injected=f"{kind} on all {sent} requests of a manifest GET",
        result=f"gave up after {sent} attempts ({ATTEMPTS} allowed, {CAP:.0f} s cap) in "
        f"{seconds:.1f}s, {len(lines)} retries logged with their reason",
        figures={"attempts": sent, "retries_logged": len(lines), "seconds": round(seconds, 2)},
    )
    if slow:
        assert 2 <= sent < ATTEMPTS, "the time cap, not the attempts, ended it"
    else:
        assert sent == ATTEMPTS
    assert f"gave up after {sent} attempts" in message
    assert not caught.value.transient
    assert [(n, allowed) for n, allowed, _ in lines] == [(n, ATTEMPTS - 1) for n in range(1, sent)]
    reasons = {
        "reset-request": "no answer",
        "reset-response": "broke off",
        "status-500": "HTTP 500 UNAVAILABLE",
        "status-502": "HTTP 502 UNAVAILABLE",
        "status-503": "HTTP 503 UNAVAILABLE",
        "status-429": "HTTP 429 UNAVAILABLE",
        "stall": "timed out",
        "truncate": "cut short",
    }
    assert all(reasons[kind] in reason for _, _, reason in lines), lines
    assert reasons[kind] in message
    assert seconds < bound
    if kind == "status-429":
        assert seconds >= (sent - 1) * proxy.retry_after, "Retry-After was honoured"


@dataclass(frozen=True)
class Refusal:
    """An answer that no retry can change, and what the client must say about it."""

    method: str
    path: str
    status: int
    body: bytes
    headers: dict[str, str]
    says: str


def _error(code: str, message: str) -> bytes:
    return json.dumps({"errors": [{"code": code, "message": message}]}).encode()


REFUSALS = {
    "401": Refusal(
        "GET",
        "/v2/",
        401,
        _error("UNAUTHORIZED", "authentication required"),
        {"WWW-Authenticate": 'Basic realm="faultproxy"'},
        "requires authentication (HTTP 401) and no credentials were found",
    ),
    "403": Refusal(
        "PUT",
        "/manifests/",
        403,
        _error("DENIED", "requested access to the resource is denied"),
        {},
        "HTTP 403",
    ),
    "404": Refusal(
        "GET",
        "/manifests/",
        404,
        _error("MANIFEST_UNKNOWN", "manifest unknown"),
        {},
        "HTTP 404 MANIFEST_UNKNOWN: manifest unknown",
    ),
    "400": Refusal(
        "PUT",
        "/blobs/uploads/",
        400,
        _error("DIGEST_INVALID", "provided digest did not match uploaded content"),
        {},
        "HTTP 400 DIGEST_INVALID: provided digest did not match uploaded content",
    ),
}


@pytest.mark.parametrize("status", sorted(REFUSALS))
def test_answers_no_retry_can_change_fail_at_once(
    services: Services, status: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    refusal = REFUSALS[status]
    blob = tmp_path / "blob"
    blob.write_bytes(os.urandom(1000))
    digest = "sha256:" + sha256_file(blob)
    repo = f"faults-refused-{RUN}/app"
    with running_proxy(services.registry, rate=0.0) as proxy:
        proxy.force(
            refusal.status,
            body=refusal.body,
            headers=refusal.headers,
            match=lambda method, path: method == refusal.method and refusal.path in path,
        )
        registry = faulty_registry(proxy)
        expected: type[RegistryError] = {"401": AuthError, "403": AuthError, "404": NotFound}.get(
            status, RegistryError
        )
        with pytest.raises(expected) as caught:
            if status == "401":
                registry.ping()
            elif status == "403":
                registry.put_manifest(repo, "v1", b"{}", MEDIA_OCI_MANIFEST)
            elif status == "404":
                registry.get_manifest(repo, "v1")
            else:
                registry.push_blob(repo, digest, 1000, blob)
        sent = proxy.count(refusal.method, refusal.path)
    message = str(caught.value)
    record(
        f"HTTP {status} answer is final",
        area="network",
        cases=1,
        injected=f"HTTP {status} to a {refusal.method} {refusal.path}",
        result=f"failed after {sent} request, {len(retry_lines(caplog))} retries: {message}",
        figures={"requests": sent, "retries": registry.stats.retries},
    )
    assert sent == 1, f"{sent} requests for a final answer"
    assert registry.stats.retries == 0 and retry_lines(caplog) == []
    assert refusal.says in message
    assert proxy.host in message
    if status in ("401", "403"):
        assert caught.value.exit_code == 2 and "docker login" in message


def test_index_refusals_fail_at_once(
    pypiserver: PackageServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    wheel = make_wheel(tmp_path, "fault_refused", f"1.0.{SERIAL}", b"x = 1\n")
    with running_proxy(pypiserver.host, rate=0.0) as proxy:
        index = faulty_index(proxy)
        proxy.force(403, body=b"forbidden", match=lambda method, _: method == "POST")
        with pytest.raises(UsageError, match="refused the credentials"):
            index.check_credentials()
        with pytest.raises(PackageIndexError, match="403 Forbidden") as caught:
            index.upload(wheel)
        posts = proxy.count("POST")
    record(
        "HTTP 403 from the package index is final",
        area="network",
        cases=2,
        injected="HTTP 403 to the credentials check and to a twine upload",
        result=f"both failed after one request each ({posts} POSTs), no retry: {caught.value}",
        figures={"requests": posts, "retries": len(retry_lines(caplog))},
    )
    assert posts == 2
    assert retry_lines(caplog) == []
    assert INDEX_PASSWORD not in str(caught.value)
