"""Issue 29, item 3: what a CI needs of a shared cache, against real servers.

Each test takes a fresh server of every protocol in `_shared_caches.STARTERS` (a
registry of its own for oci://, BuildGrid for grpc://, nginx WebDAV for http://)
and builds the example suite's wheels and zipapps in clean clones:

- a server stopped while the build stores: the build succeeds, its outputs equal a
  local build's, and stderr has exactly one warning (no retry lines);
- a server that answers nothing in time: each call times out after
  $SHIPYARD_CACHE_TIMEOUT, the remote is dropped after the first, one warning;
- a server that accepts connections and never answers, with the default
  patience: the build goes on within seconds ($SHIPYARD_CACHE_CONNECT_TIMEOUT),
  one warning;
- `--cache-mode=read-only`: hits are restored, nothing is written (the server's
  entries before and after are the same);
- `--cache-mode=write-only`: nothing is restored, even what the server holds, and
  everything built, or restored from the local cache, is stored;
- a server that takes no writes (a registry granting pulls only, nginx answering
  PUT 403, a BuildGrid ActionCache without updates): read, never written, one note.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration._repo import clone, copy_worktree, shipyard
from tests.integration._shared_caches import STARTERS, CacheServer, cache_server
from tests.integration.stallproxy import running_stall

__all__ = ["cache_server"]  # the fixture the tests take, imported for pytest to find

pytestmark = pytest.mark.integration

SELECTION = ("--target=standard", "--output=wheel,zipapp")
ONE = ("--binary=echo", "--output=wheel,zipapp")  # a subset of SELECTION: echo's actions


@dataclass(frozen=True)
class Suite:
    """The repository copy every clone is made from, and its local build's outputs."""

    origin: Path
    outputs: dict[str, str]
    seconds: float
    cache: Path  # the local cache that build filled


def outputs(root: Path) -> dict[str, str]:
    """Every wheel and zipapp under dist/, by path, with its sha256."""
    dist = root / "dist"
    return {
        str(p.relative_to(dist)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(dist.rglob("*"))
        if p.suffix in (".whl", ".pyz") and p.is_file()
    }


def report(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / "dist" / "report.json").read_text())
    return data


def statuses(root: Path) -> dict[str, str]:
    return {a["id"]: a["status"] for a in report(root)["actions"]}


def warnings(stderr: str) -> list[str]:
    """The lines of stderr that warn, or tell of a retry."""
    return [
        line
        for line in stderr.splitlines()
        if line.startswith("shipyard: warning:") or "retry" in line
    ]


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Suite:
    folder = tmp_path_factory.mktemp("suite")
    origin = copy_worktree(folder / "origin")
    local = clone(origin, folder / "local")
    started = time.monotonic()
    done = shipyard(local, "build", *SELECTION, f"--cache-dir={folder / 'local-cache'}")
    assert done.returncode == 0, done.stderr
    return Suite(origin, outputs(local), time.monotonic() - started, folder / "local-cache")


def build(
    suite: Suite, name: Path, url: str, *flags: str, **env: str
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A clean clone at `name`, built with an empty local cache and `--cache=url`."""
    root = clone(suite.origin, name)
    cache = f"--cache-dir={name.with_name(name.name + '-cache')}"
    return root, shipyard(root, "build", *SELECTION, cache, f"--cache={url}", *flags, **env)


def went_on_locally(
    suite: Suite, root: Path, done: subprocess.CompletedProcess[str], seconds: float
) -> str:
    """The one warning of a build that gave its shared cache up early (within 20 s
    of a local build) and still made the local build's outputs."""
    assert done.returncode == 0, done.stderr
    assert outputs(root) == suite.outputs
    (warning,) = warnings(done.stderr)
    assert seconds < suite.seconds + 20, f"{seconds:.1f}s against {suite.seconds:.1f}s locally"
    remote = report(root)["cache"]["remote"]
    assert remote["disabled"] and remote["hits"] == remote["stored"] == 0
    return warning


def test_a_server_stopped_mid_build_leaves_a_correct_build_and_one_warning(
    suite: Suite, cache_server: CacheServer, tmp_path: Path
) -> None:
    stopped = threading.Event()
    finished = threading.Event()

    def stop_once_something_is_stored() -> None:
        while not finished.is_set():
            if cache_server.entries():
                cache_server.stop()
                stopped.set()
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=stop_once_something_is_stored, daemon=True)
    watcher.start()
    try:
        root, done = build(suite, tmp_path / "repo", cache_server.url)
    finally:
        finished.set()
        watcher.join(timeout=30)
    assert stopped.is_set(), "the server was stopped while the build ran"
    assert done.returncode == 0, done.stderr
    assert outputs(root) == suite.outputs
    (warning,) = warnings(done.stderr)
    assert "unavailable" in warning and "local cache only" in warning, warning
    remote = report(root)["cache"]["remote"]
    assert remote["disabled"], remote
    # The server went while the build stored (disabled says the build saw it go):
    # at most the stores that finished before, never all.
    assert remote["stored"] < len(statuses(root)), remote
    assert set(statuses(root).values()) == {"built"}
    assert f"remote cache {cache_server.url} (read-write)" in done.stderr


def test_a_slow_server_times_out_and_the_build_goes_on_locally(
    suite: Suite, cache_server: CacheServer, tmp_path: Path
) -> None:
    if cache_server.slow is None:
        pytest.skip(f"no slow proxy for {cache_server.protocol}:// yet")
    patience = {"SHIPYARD_CACHE_TIMEOUT": "1", "SHIPYARD_CACHE_RETRIES": "1"}
    with cache_server.slow(60) as url:
        started = time.monotonic()
        root, done = build(suite, tmp_path / "repo", url, **patience)
        seconds = time.monotonic() - started
    # Two tries of one call of 1 s each, then no more calls: far from a 60 s stall.
    warning = went_on_locally(suite, root, done, seconds)
    assert "timed out" in warning, warning


SILENT = {"oci": "oci://{}/cache", "http": "http://{}/cache", "grpc": "grpc://{}/main"}


@pytest.mark.parametrize("protocol", sorted(STARTERS))
def test_a_server_that_never_answers_costs_seconds_with_the_default_patience(
    suite: Suite, protocol: str, tmp_path: Path
) -> None:
    """A listening socket that never replies (no real server does that on demand):
    with no patience set, the first calls give up within the connect time-out (5 s;
    a registry's TLS probe comes first), not after 3 tries of 30 s."""
    with running_stall() as silent:
        started = time.monotonic()
        root, done = build(suite, tmp_path / "repo", SILENT[protocol].format(silent.host))
        seconds = time.monotonic() - started
    assert silent.connections >= 1, "the client did try"
    warning = went_on_locally(suite, root, done, seconds)
    assert "unavailable" in warning and "timed out" in warning, warning


def test_read_only_restores_hits_and_writes_nothing(
    suite: Suite, cache_server: CacheServer, tmp_path: Path
) -> None:
    assert cache_server.entries() == set()
    _, empty = build(suite, tmp_path / "first", cache_server.url, "--cache-mode=read-only")
    assert empty.returncode == 0, empty.stderr
    assert cache_server.entries() == set(), "a miss is not written either"

    # One binary's actions in the cache (a main build of a subset), then a pull
    # request's build of everything: those are restored, the rest built, none stored.
    filler = clone(suite.origin, tmp_path / "filler")
    filled = shipyard(
        filler,
        "build",
        *ONE,
        f"--cache-dir={tmp_path / 'filler-cache'}",
        f"--cache={cache_server.url}",
    )
    assert filled.returncode == 0, filled.stderr
    before = cache_server.entries()
    assert before
    root, done = build(suite, tmp_path / "pr", cache_server.url, "--cache-mode=read-only")
    assert done.returncode == 0, done.stderr
    assert cache_server.entries() == before
    assert outputs(root) == suite.outputs
    remote = report(root)["cache"]["remote"]
    assert remote["mode"] == "read-only" and remote["stored"] == 0 and remote["bytes_up"] == 0
    cached = list(statuses(root).values()).count("cached")
    assert remote["hits"] == len(before) == cached
    assert 0 < cached < len(statuses(root)), "some restored, the rest built"
    assert warnings(done.stderr) == []


def test_write_only_restores_nothing_even_when_present(
    suite: Suite, cache_server: CacheServer, tmp_path: Path
) -> None:
    env = {"SHIPYARD_CACHE_MODE": "write-only"}
    # A warming job on a machine whose local cache has everything: the local hits
    # go up, so the shared cache holds every action afterwards.
    warm = tmp_path / "warm-local-cache"
    shutil.copytree(suite.cache, warm)
    root = clone(suite.origin, tmp_path / "warm")
    done = shipyard(
        root, "build", *SELECTION, f"--cache-dir={warm}", f"--cache={cache_server.url}", **env
    )
    assert done.returncode == 0, done.stderr
    assert set(statuses(root).values()) == {"cached"}, "from the local cache"
    assert report(root)["cache"]["remote"]["stored"] == len(statuses(root))
    held = cache_server.entries()
    assert len(held) == len(statuses(root))

    # With an empty local cache nothing comes from the server, though it has it all.
    root, done = build(suite, tmp_path / "warming", cache_server.url, **env)
    assert done.returncode == 0, done.stderr
    assert set(statuses(root).values()) == {"built"}, "nothing came from the server"
    assert outputs(root) == suite.outputs
    remote = report(root)["cache"]["remote"]
    assert remote["mode"] == "write-only"
    assert (remote["hits"], remote["misses"], remote["bytes_down"]) == (0, 0, 0)
    assert remote["stored"] == len(statuses(root))
    assert cache_server.entries() == held


def test_a_server_that_takes_no_writes_is_read_and_noted_once(
    suite: Suite, cache_server: CacheServer, tmp_path: Path
) -> None:
    if cache_server.read_only is None:
        pytest.skip(f"no read-only server for {cache_server.protocol}:// yet")
    filler = clone(suite.origin, tmp_path / "filler")
    cache = f"--cache-dir={tmp_path / 'filler-cache'}"
    filled = shipyard(filler, "build", *ONE, cache, f"--cache={cache_server.url}")
    assert filled.returncode == 0, filled.stderr
    held = cache_server.entries()
    assert held
    with cache_server.read_only() as (url, env):
        root, done = build(suite, tmp_path / "repo", url, **env)
    assert done.returncode == 0, done.stderr
    assert outputs(root) == suite.outputs
    assert cache_server.entries() == held
    assert warnings(done.stderr) == []
    notes = [line for line in done.stderr.splitlines() if line.startswith("shipyard: note:")]
    assert len(notes) == 1 and "takes no writes" in notes[0], done.stderr
    remote = report(root)["cache"]["remote"]
    assert remote["mode"] == "read-write" and remote["read_only_server"] is True
    assert remote["stored"] == 0 and remote["hits"] == len(held) and remote["disabled"] is None
    assert len(held) < len(statuses(root)), "some actions were built, and not stored"
    assert "the server takes no writes" in done.stderr
