"""The registry and the remote cache through a faulty network; answers no retry can change.

What the faults are and what every test checks: tests/integration/_faults.py.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from shipyard._fs import sha256_file
from shipyard._http.retry import RetryPolicy
from shipyard.engine.cache.remote import RemoteCache
from shipyard.engine.scheduler import Artifact
from shipyard.oci.remote.push import Publisher, read_layout_image
from shipyard.oci.remote.registry import (
    MEDIA_OCI_MANIFEST,
    AuthError,
    NotFound,
    Registry,
    RegistryError,
)
from tests.integration._faults import (
    ATTEMPTS,
    CAP,
    PLATFORMS,
    RATE,
    RUN,
    SEEDS,
    STALL,
    TIMEOUT,
    blob_digests,
    check_retries,
    client_env,
    describe,
    faulty_registry,
    only,
    pull_back,
    retry_lines,
    worst_single,
)
from tests.integration.conftest import Services
from tests.integration.faultproxy import FAULT_KINDS, running_proxy
from tests.integration.test_push import make_layout
from tests.reliability import record

pytestmark = [
    pytest.mark.integration,
    pytest.mark.reliability,
    pytest.mark.requires("registry"),
]


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
            made.append(Artifact("wheel", "", "any", path, sha256_file(path), path.stat().st_size))
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
