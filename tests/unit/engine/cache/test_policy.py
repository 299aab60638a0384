"""The shared cache under a CI's policy: modes, one warning for a server gone, one note
for a server that takes no writes, and the summary report.json records.

The client here is a small fake: a server that fails on demand is the fault under
test (the real servers are in tests/integration/test_remote_cache_policy.py)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path

import pytest

from shipyard.artifacts import Artifact
from shipyard.engine.cache import policy
from shipyard.engine.cache.checks import Declared
from shipyard.engine.cache.endpoint import RemoteStats, RemoteUnavailable
from shipyard.engine.cache.mode import CacheMode
from shipyard.engine.cache.policy import GuardedRemote, open_guarded, public_url
from shipyard.errors import UsageError

OUT = (Artifact("wheel", "", "any", Path("dist/a.whl"), "0" * 64, 1),)
URL = "oci://127.0.0.1:9/cache"


class _Client:
    """A protocol client whose server holds `entries`, fails when `down`, and may
    refuse writes (`writable`, or `refuse` to learn it during a store)."""

    def __init__(self, entries: dict[str, tuple[Artifact, ...]] | None = None) -> None:
        self.entries = dict(entries or {})
        self.down = False
        self.writable = True
        self.refuse = False
        self.calls: list[tuple[str, str]] = []
        self.stats = RemoteStats()

    def restore(
        self, key: str, repo: Path, declared: Declared | None = None
    ) -> tuple[Artifact, ...] | None:
        self.calls.append(("restore", key))
        self.stats.calls += 1
        if self.down:
            raise RemoteUnavailable("127.0.0.1:9: no answer (Connection refused)")
        found = self.entries.get(key)
        self.stats.bytes_down += 10 if found else 0
        return found

    def store(self, key: str, outputs: tuple[Artifact, ...], repo: Path) -> None:
        self.calls.append(("store", key))
        self.stats.calls += 1
        if self.down:
            raise RemoteUnavailable("127.0.0.1:9: timed out")
        if self.refuse:
            self.writable = False
            return
        self.entries[key] = outputs
        self.stats.bytes_up += 10


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _remote_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == policy.__name__]


def test_read_write_restores_and_stores(tmp_path: Path) -> None:
    client = _Client({"hit": OUT})
    guarded = GuardedRemote(client, URL, "read-write")
    assert guarded.restore("hit", tmp_path) == OUT
    assert guarded.restore("miss", tmp_path) is None
    guarded.store("miss", OUT, tmp_path)
    assert client.entries["miss"] == OUT
    summary = guarded.summary()
    assert (summary.hits, summary.misses, summary.stored) == (1, 1, 1)
    assert (summary.calls, summary.bytes_down, summary.bytes_up) == (3, 10, 10)
    assert summary.disabled is None


def test_read_only_never_writes_even_after_a_miss(tmp_path: Path) -> None:
    client = _Client()
    guarded = GuardedRemote(client, URL, "read-only")
    assert guarded.restore("k", tmp_path) is None
    guarded.store("k", OUT, tmp_path)
    assert client.calls == [("restore", "k")] and client.entries == {}
    assert guarded.summary().stored == 0


def test_write_only_never_reads_even_when_present(tmp_path: Path) -> None:
    client = _Client({"k": OUT})
    guarded = GuardedRemote(client, URL, "write-only")
    assert guarded.restore("k", tmp_path) is None
    guarded.store("j", OUT, tmp_path)
    assert client.calls == [("store", "j")]
    assert guarded.uploads_local_hits
    summary = guarded.summary()
    assert (summary.hits, summary.misses, summary.stored) == (0, 0, 1)


@pytest.mark.parametrize("mode", ["read-write", "read-only", "write-only"])
def test_a_server_gone_is_one_warning_then_never_asked_again(
    mode: CacheMode, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    client = _Client()
    client.down = True
    guarded = GuardedRemote(client, URL, mode)
    for key in ("a", "b", "c"):
        assert guarded.restore(key, tmp_path) is None
        guarded.store(key, OUT, tmp_path)
    assert len(client.calls) == 1, "the first failure disables the cache"
    (line,) = _remote_lines(caplog)
    assert "unavailable" in line and ("Connection refused" in line or "timed out" in line)
    assert "local cache only" in line
    summary = guarded.summary()
    assert summary.disabled is not None and summary.stored == 0
    assert "disabled after the warning" in summary.line()


def test_many_workers_failing_at_once_still_warn_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    client = _Client()
    client.down = True
    guarded = GuardedRemote(client, URL, "read-write")
    start = threading.Barrier(8)

    def work(n: int) -> None:
        start.wait()
        guarded.restore(f"k{n}", tmp_path)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(_remote_lines(caplog)) == 1


def test_a_server_that_takes_no_writes_is_noted_once_and_never_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    client = _Client({"hit": OUT})
    client.writable = False
    guarded = GuardedRemote(client, URL, "read-write")
    for key in ("a", "b"):
        guarded.store(key, OUT, tmp_path)
    assert guarded.restore("hit", tmp_path) == OUT, "reads go on"
    assert ("store", "a") not in client.calls
    (line,) = _remote_lines(caplog)
    assert "takes no writes" in line
    assert guarded.summary().read_only_server and guarded.summary().stored == 0


def test_a_write_refused_during_the_call_is_noted_once_and_not_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    client = _Client()
    client.refuse = True
    guarded = GuardedRemote(client, URL, "read-write")
    guarded.store("a", OUT, tmp_path)
    guarded.store("b", OUT, tmp_path)
    assert client.calls == [("store", "a")]
    assert len(_remote_lines(caplog)) == 1 and guarded.summary().stored == 0


def test_the_summary_is_json_ready_and_names_no_secret() -> None:
    guarded = GuardedRemote(_Client(), "https://user:pw@cache.example/ci?token=x#f", "read-only")
    data = guarded.summary().to_json()
    assert data["url"] == "https://cache.example/ci"
    assert set(data) >= {"url", "mode", "hits", "misses", "stored", "bytes_down", "bytes_up"}
    assert data["disabled"] is None
    assert guarded.summary().line().startswith("remote cache https://cache.example/ci (read-only)")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("oci://127.0.0.1:5000/team/cache", "oci://127.0.0.1:5000/team/cache"),
        ("grpcs://remote.example:443/main", "grpcs://remote.example:443/main"),
        ("http://u:p@h:8080/p?x=1", "http://h:8080/p"),
    ],
)
def test_public_url(url: str, shown: str) -> None:
    assert public_url(url) == shown


def test_a_client_that_cannot_open_is_a_cache_disabled_from_the_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)

    def unreachable(*_: object) -> object:
        raise RemoteUnavailable("127.0.0.1:9: capabilities: no answer")

    monkeypatch.setattr(policy, "open_remote", unreachable)
    guarded = open_guarded("grpc://127.0.0.1:9", "read-write", {})
    assert guarded.restore("k", tmp_path) is None
    assert guarded.summary().disabled == "127.0.0.1:9: capabilities: no answer"
    assert len(_remote_lines(caplog)) == 1


def test_bad_urls_and_variables_are_usage_errors_before_anything_runs() -> None:
    with pytest.raises(UsageError, match="--cache="):
        open_guarded("ftp://x/y", "read-write", {})
    with pytest.raises(UsageError, match="SHIPYARD_CACHE_TIMEOUT"):
        open_guarded(URL, "read-write", {"SHIPYARD_CACHE_TIMEOUT": "soon"})


def test_a_registry_nobody_listens_on_is_given_up_in_bounded_time(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A real refused connection (no fake needed): the registry client's retries are
    bounded by $SHIPYARD_CACHE_RETRIES and logged quietly; the one warning is ours."""
    caplog.set_level(logging.WARNING)
    url = f"oci://127.0.0.1:{_free_port()}/cache"
    env = {"SHIPYARD_CACHE_RETRIES": "1", "SHIPYARD_CACHE_TIMEOUT": "2", "DOCKER_CONFIG": "/x"}
    guarded = open_guarded(url, "read-write", env)
    started = time.monotonic()
    assert guarded.restore("k", tmp_path) is None
    guarded.store("k", OUT, tmp_path)
    assert time.monotonic() - started < 10
    summary = guarded.summary()
    assert summary.disabled is not None and "Connection refused" in summary.disabled
    assert summary.calls >= 2, "one retry"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
