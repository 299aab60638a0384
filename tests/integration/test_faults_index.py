"""The package index through a faulty network: twine uploads and simple-API queries.

What the faults are and what every test checks: tests/integration/_faults.py.
"""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path

import pytest

from shipyard._fs import sha256_file
from shipyard.errors import UsageError
from shipyard.release import PackageIndex, PackageIndexError
from shipyard.release.index import _TwineFailure
from tests.integration._faults import (
    RATE,
    SERIAL,
    STALL,
    PackageServer,
    describe,
    faulty_index,
    make_wheel,
    pypiserver,
    retry_lines,
)
from tests.integration._release import INDEX_PASSWORD, INDEX_USER
from tests.integration.faultproxy import running_proxy
from tests.reliability import record

__all__ = ["pypiserver"]  # fixtures the tests take, imported for pytest to find
pytestmark = [
    pytest.mark.integration,
    pytest.mark.reliability,
    pytest.mark.requires("registry"),
]


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
