"""The HTTP library under the registry and index clients: its layering and one retry loop.

`shipyard._http` knows nothing of registries or indexes (no import from above it);
the package index sends its requests through `_http.transport.Client`, so it gets
the same plain-HTTP checks, typed errors, retry loop and retry log as the registry.
The fake server is tests/unit/_fake_registry.py.
"""

from __future__ import annotations

import ast
import logging
import random
from pathlib import Path

import pytest

import shipyard._http
from shipyard._http.retry import RetryPolicy
from shipyard._http.transport import PlainHTTPRefused
from shipyard.errors import UsageError
from shipyard.release.index import PackageIndex, PackageIndexError, index_from_env
from tests.unit._fake_registry import FakeRegistry, fake, sleeps

__all__ = ["fake", "sleeps"]  # fixtures used here

WHEEL = "demo-1.0-py3-none-any.whl"


def index_for(fake: FakeRegistry, sleeps: list[float]) -> PackageIndex:
    policy = RetryPolicy(attempts=3, base_delay=0.5, sleep=sleeps.append, rng=random.Random(3))
    return PackageIndex(f"http://{fake.host}/", "user", "secret", timeout=5.0, retry=policy)


def test_the_http_library_imports_nothing_above_it() -> None:
    """_http is a library under oci and release: it never imports them (no upward layering)."""
    upward = []
    for path in Path(shipyard._http.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            upward += [
                f"{path.name}: {name}"
                for name in names
                if name.startswith("shipyard.")
                # errors and _environ (the table of variable names) are the lowest layer
                and not name.startswith(("shipyard._http", "shipyard.errors", "shipyard._environ"))
            ]
    assert upward == []


def test_index_retries_through_the_shared_loop_and_log(
    fake: FakeRegistry, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="shipyard._http.retry")
    page = f'<a href="../../packages/{WHEEL}#sha256=00">{WHEEL}</a>'.encode()
    fake.route("GET", "/simple/demo/", (503, {"Retry-After": "2"}, b""), (200, {}, page))
    index = index_for(fake, sleeps)
    assert index.find(WHEEL) == f"http://{fake.host}/packages/{WHEEL}"
    assert fake.count("GET", "/simple/demo/") == 2
    assert len(sleeps) == 1 and sleeps[0] >= 2.0, "Retry-After is honoured"
    lines = [(r.name, r.getMessage()) for r in caplog.records]
    assert lines == [
        (
            "shipyard._http.retry",
            f"read http://{fake.host}/simple/demo/: retry 1 of 2 in {sleeps[0]:.2f} s after: "
            "HTTP 503",
        )
    ]


def test_index_gives_up_with_its_own_error(fake: FakeRegistry, sleeps: list[float]) -> None:
    fake.route("GET", "/simple/demo/", (502, {}, b""))
    with pytest.raises(PackageIndexError, match="HTTP 502; gave up after 3 attempts"):
        index_for(fake, sleeps).find(WHEEL)
    assert fake.count("GET", "/simple/demo/") == 3


def test_index_refuses_a_plain_http_link_off_loopback(
    fake: FakeRegistry, sleeps: list[float]
) -> None:
    """A simple page naming a plain-HTTP file elsewhere: refused, nothing is sent there."""
    page = f'<a href="http://files.example.invalid/{WHEEL}">{WHEEL}</a>'.encode()
    fake.route("GET", "/simple/demo/", (200, {}, page))
    with pytest.raises(PlainHTTPRefused, match=r"refusing plain HTTP to files\.example\.invalid"):
        index_for(fake, sleeps).sha256(WHEEL)
    assert sleeps == [], "refused at once, not retried"


def test_index_ca_file_variable_must_name_a_file(tmp_path: Path) -> None:
    env = {
        "SHIPYARD_INDEX_URL": "https://index.example.invalid/",
        "SHIPYARD_INDEX_USER": "u",
        "SHIPYARD_INDEX_PASSWORD": "p",
        "SHIPYARD_INDEX_CA_FILE": str(tmp_path / "missing.pem"),
    }
    with pytest.raises(UsageError, match=r"SHIPYARD_INDEX_CA_FILE=.*missing\.pem names no file"):
        index_from_env(env)
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    env["SHIPYARD_INDEX_CA_FILE"] = str(tmp_path / "ca.pem")
    index = index_from_env(env)
    assert index is not None and index.ca_file == tmp_path / "ca.pem"
