"""Shared by the crash-consistency tests (test_crash_*.py): kill, wait, recover, inspect.

Crash consistency: SIGKILL at random moments never leaves a partial artifact in view.
Four operations are killed, each at least TRIALS times, one test file each: a build
(test_crash_build.py), the local cache write at the end of an action
(test_crash_cache_write.py), a push of an image layout (test_crash_push.py), and the
upload to a registry-backed cache (test_crash_remote_cache.py). Every test first times
an uninterrupted run, then kills the CLI (its whole process group, so PEP 517 children
die too) at moments drawn with a seeded RNG across that duration, looks for partial
artifacts (a file in dist/ or the cache under its final name that is not whole; a
registry tag naming a manifest whose blobs or child manifests are missing), and runs
again: the next run must succeed with the bytes, or digests, of the uninterrupted run.

The repository is tiny (two small binaries, wheel and zipapp); one carries a
4 MiB payload so that writing its outputs to the cache or a registry takes long
enough for kills to land inside the write. `tiny` builds it once per session.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from shipyard._fs import TEMP_PREFIX, sha256_file
from shipyard.oci.remote.registry import MANIFEST_MEDIA_TYPES, MEDIA_DOCKER_LIST, MEDIA_OCI_INDEX
from tests.integration._repo import clone

REPO = Path(__file__).resolve().parents[2]
TRIALS = 20
SPREAD = 1.1  # kill moments run 10% past the baseline, so some land after completion
PAYLOAD = 4 << 20
RUN = uuid.uuid4().hex[:8]  # the shared registry outlives a run: one prefix per run
MANIFEST = """\
schema: 1
project: {name: tiny, version: git, python: "3.11"}
defaults:
  outputs: [wheel, zipapp]
  platforms: [linux/amd64]
binaries:
  meshctl: {source: ctl, entrypoint: "meshctl.cli:main"}
  echo: {source: echo, entrypoint: "meshecho.main:main"}
"""
IMAGE_MANIFEST = """\
schema: 1
project: {name: tiny, version: "1.0.0", python: "3.11"}
binaries:
  app:
    source: app
    entrypoint: "app:main"
    outputs: [image]
    platforms: [linux/amd64, linux/arm64, linux/arm/v7]
    image: {hubs: ["${HUB}"], tags: ["1.0.0", latest]}
"""
_FIXED_DATES = {
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}


# -- running and killing the CLI -------------------------------------------------------


def _cli_env(tmp: Path | None = None, **extra: str) -> dict[str, str]:
    """The CLI's environment: plain output; TMPDIR in `tmp`, to see what a kill leaks there."""
    env = {**os.environ, "CI": "1", **extra}
    if tmp is not None:
        (tmp / "tmpdir").mkdir(exist_ok=True)
        env["TMPDIR"] = str(tmp / "tmpdir")
    return env


def _trial_figures(
    moments: _Moments,
    partial: int,
    recovered: int,
    leaked: list[str],
    **extra: float,
) -> dict[str, int | float | str]:
    """The figures every kill test records, plus its own."""
    return {
        "trials": moments.trials,
        "killed_midway": moments.midway,
        "after_completion": moments.trials - moments.midway,
        "partial_artifacts": partial,
        "recovered": recovered,
        "left_in_tmpdir": len(leaked),
        "seconds": round(moments.seconds, 1),
        **extra,
    }


def _leaked(tmp: Path) -> list[str]:
    """What the runs left in their TMPDIR."""
    return sorted(p.name for p in (tmp / "tmpdir").iterdir())


def _launch(cwd: Path, args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:  # a file, not a pipe: a silent reader never stalls the CLI
        return subprocess.Popen(
            [sys.executable, "-m", "shipyard", *args],
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: the kill reaches its children
        )


def _wait_for(process: subprocess.Popen[bytes], ready: Callable[[], bool]) -> float:
    """Poll until `ready()` (or the process ends); the moment it happened."""
    deadline = time.monotonic() + 300
    while not ready() and process.poll() is None:
        assert time.monotonic() < deadline, "the run never reached its trigger"
        time.sleep(0.0005)
    return time.monotonic()


def _always() -> bool:
    return True


def _sigkill(
    cwd: Path,
    args: list[str],
    delay: float,
    log: Path,
    env: dict[str, str],
    ready: Callable[[], bool] = _always,
) -> bool:
    """Run the CLI, SIGKILL its process group `delay` seconds after `ready()` holds.

    True if the kill came while it ran; False if it had finished (successfully).
    """
    process = _launch(cwd, args, log, env)
    try:
        start = _wait_for(process, ready)
        while (left := start + delay - time.monotonic()) > 0 and process.poll() is None:
            time.sleep(min(left, 0.002))
        killed = process.poll() is None
        if killed:  # not reaped yet, so the group id is still ours even if it just exited
            os.killpg(process.pid, signal.SIGKILL)
        returncode = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    if not killed:
        assert returncode == 0, f"the run failed by itself:\n{log.read_text()}"
    return killed


def _timed(
    cwd: Path,
    args: list[str],
    log: Path,
    env: dict[str, str],
    ready: Callable[[], bool] = _always,
    done: Callable[[], bool] | None = None,
) -> float:
    """The baseline: run the CLI uninterrupted; seconds from `ready()` to `done()` (or exit)."""
    process = _launch(cwd, args, log, env)
    start = _wait_for(process, ready)
    end = _wait_for(process, done) if done is not None else None
    assert process.wait(timeout=300) == 0, log.read_text()
    assert done is None or done(), f"the run ended before it was done:\n{log.read_text()}"
    return (end or time.monotonic()) - start


def _baseline(measure: Callable[[int], float], runs: int = 3) -> float:
    """The median of a few uninterrupted runs: one alone is at the mercy of the load."""
    return statistics.median(measure(i) for i in range(runs))


class _Moments:
    """The kill moments of one test, drawn with a seeded RNG across a measured window.

    The window is measured before the trials, and this machine's speed drifts: runs
    can turn out shorter than it, and most kills would land after completion. Each
    kill that does shrinks the window by a fifth, and trials go on past TRIALS (to
    at most three times as many) until half of TRIALS have landed mid-way.
    """

    def __init__(self, seed: int, window: float) -> None:
        self.rng = random.Random(seed)
        self.window = window
        self.trials = 0
        self.midway = 0
        self.began = time.monotonic()
        self.seconds = 0.0

    def __iter__(self) -> Iterator[float]:
        while self.trials < TRIALS or (self.midway < TRIALS // 2 and self.trials < 3 * TRIALS):
            self.trials += 1
            yield self.rng.uniform(0, SPREAD * self.window)

    def landed(self, midway: bool) -> None:
        """Note where the last kill landed."""
        self.midway += midway
        if not midway:
            self.window *= 0.8

    def finish(self, tmp: Path, what: str) -> list[str]:
        """Check the trials' end: nothing of ours left in TMPDIR, enough kills `what`.

        Returns what the runs left in TMPDIR.
        """
        self.seconds = time.monotonic() - self.began
        leaked = _leaked(tmp)
        assert not [name for name in leaked if name.startswith(TEMP_PREFIX)], leaked
        assert self.midway >= TRIALS // 2, f"only {self.midway} of {self.trials} kills {what}"
        return leaked

    def summary(self) -> str:
        """Where the kills landed, for the record."""
        return f"killed mid-way {self.midway}, after completion {self.trials - self.midway}"


def _recover(cwd: Path, args: list[str], log: Path, env: dict[str, str]) -> None:
    """The run after a kill: it must succeed."""
    done = subprocess.run(
        [sys.executable, "-m", "shipyard", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        check=False,
    )
    log.write_bytes(done.stdout)
    assert done.returncode == 0, f"the run after the kill failed:\n{done.stdout.decode()}"


# -- what a killed run may leave -------------------------------------------------------


def _outputs(dist: Path) -> dict[str, str]:
    """Wheels and zipapps under their final names: dist-relative path -> sha256."""
    return {
        f"{kind}/{p.name}": sha256_file(p)
        for kind in ("wheels", "zipapps")
        for p in sorted((dist / kind).glob("*"))
        if not p.name.startswith(TEMP_PREFIX)
    }


def _dist_problems(dist: Path, good: dict[str, str]) -> list[str]:
    """Outputs under a final name that are not whole (not the uninterrupted run's bytes)."""
    problems = [
        f"dist/{name} is not the uninterrupted build's file"
        for name, digest in _outputs(dist).items()
        if good.get(name) != digest
    ]
    for name in ("report.json", "trace.json"):
        if (dist / name).is_file():
            try:
                json.loads((dist / name).read_text())
            except ValueError:
                problems.append(f"dist/{name} is not whole JSON")
    return problems


@dataclass(frozen=True)
class CacheState:
    """What a local action cache holds after a run: entries, temporaries, damage."""

    entries: frozenset[str]
    temporaries: int
    problems: tuple[str, ...]


def _cache_state(cache: Path) -> CacheState:
    """Every named blob hashes to its name; every entry is whole JSON naming whole blobs."""
    root = cache / "v1"
    problems: list[str] = []
    temporaries = sum(1 for p in root.rglob(f"{TEMP_PREFIX}*")) if root.is_dir() else 0
    for blob in sorted((root / "blobs").glob("*")):
        if not blob.name.startswith(TEMP_PREFIX) and sha256_file(blob) != blob.name:
            problems.append(f"cache blob {blob.name} is not whole")
    entries: set[str] = set()
    for entry in sorted((root / "actions").glob("*.json")):
        try:
            outputs = json.loads(entry.read_text())["outputs"]
        except (ValueError, KeyError):
            problems.append(f"cache entry {entry.name} is not whole")
            continue
        entries.add(entry.stem)
        for output in outputs:
            blob = root / "blobs" / output["sha256"]
            if not blob.is_file() or blob.stat().st_size != output["size"]:
                problems.append(f"cache entry {entry.name} names a missing blob")
    return CacheState(frozenset(entries), temporaries, tuple(problems))


class RegistryView:
    """Direct HTTP reads of the loopback registry, independent of shipyard's client."""

    def __init__(self, host: str) -> None:
        self.base = f"http://{host}/v2"
        self.session = requests.Session()
        self.session.trust_env = False  # loopback only, never through a proxy

    def tags(self, repo: str) -> list[str]:
        """The repository's tags ([] when it does not exist yet)."""
        resp = self.session.get(f"{self.base}/{repo}/tags/list", timeout=30)
        if resp.status_code == 404:
            return []
        resp.raise_for_status()
        return sorted(resp.json().get("tags") or [])

    def manifest(self, repo: str, reference: str) -> tuple[str, dict[str, Any]] | None:
        """(digest, document) of a manifest by tag or digest; None when absent."""
        headers = {"Accept": ", ".join(MANIFEST_MEDIA_TYPES)}
        url = f"{self.base}/{repo}/manifests/{reference}"
        resp = self.session.get(url, headers=headers, timeout=30)
        if resp.status_code == 404:
            return None
        resp.raise_for_status()
        return resp.headers["Docker-Content-Digest"], json.loads(resp.content)

    def has_blob(self, repo: str, digest: str) -> bool:
        """HEAD of the blob answers 200."""
        resp = self.session.head(f"{self.base}/{repo}/blobs/{digest}", timeout=30)
        return resp.status_code == 200

    def tagged(self, repo: str) -> tuple[dict[str, str], list[str]]:
        """tag -> digest, and what is missing below each tag (must be nothing)."""
        found: dict[str, str] = {}
        missing: list[str] = []
        for tag in self.tags(repo):
            got = self.manifest(repo, tag)
            if got is None:
                missing.append(f"{repo}:{tag} is listed but has no manifest")
                continue
            found[tag], doc = got
            missing += [f"{repo}:{tag} -> {m}" for m in self._missing_below(repo, doc)]
        return found, missing

    def _missing_below(self, repo: str, doc: dict[str, Any]) -> Iterator[str]:
        if doc.get("mediaType") in (MEDIA_OCI_INDEX, MEDIA_DOCKER_LIST):
            for child in doc.get("manifests") or []:
                got = self.manifest(repo, child["digest"])
                if got is None:
                    yield f"child manifest {child['digest']} missing"
                else:
                    yield from self._missing_below(repo, got[1])
            return
        for desc in [doc["config"], *(doc.get("layers") or [])]:
            if not self.has_blob(repo, desc["digest"]):
                yield f"blob {desc['digest']} missing"


# -- the tiny repository ---------------------------------------------------------------


def _git(target: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(target), "-c", "user.email=t@t.invalid", "-c", "user.name=t", *args],
        check=True,
        capture_output=True,
        env={**os.environ, **_FIXED_DATES},
    )


@dataclass(frozen=True)
class Tiny:
    """The tiny repository, its uninterrupted build, and a warm cache short of one entry."""

    origin: Path
    good: dict[str, str]  # dist-relative output -> sha256 of the uninterrupted build
    build_seconds: float
    warm_cache: Path  # every entry but meshctl's zipapp: a run builds and stores only that
    warm_keys: frozenset[str]


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    origin = tmp_path_factory.mktemp("crash") / "origin"
    # meshctl needs the mesh-api library (found by its name): three wheels, two zipapps.
    for name in ("ctl", "echo", "libs/api"):
        shutil.copytree(REPO / "examples" / "mesh" / name, origin / name)
    payload = random.Random(20261203).randbytes(PAYLOAD)  # incompressible, same every run
    (origin / "ctl" / "src" / "meshctl" / "payload.bin").write_bytes(payload)
    (origin / "binaries.yaml").write_text(MANIFEST)
    (origin / ".gitignore").write_text("/dist/\n")
    _git(origin, "init", "-q")
    _git(origin, "add", "-A")
    _git(origin, "commit", "-qm", "tiny")
    # Built twice, each in its own clone with its own cache: the outputs must be the
    # same bytes, and the second (warm) build's duration is the baseline.
    builds: list[tuple[dict[str, str], float]] = []
    for name in ("first", "reference"):
        root = clone(origin, origin.parent / name)
        cache = origin.parent / f"{name}-cache"
        args = ["build", f"--cache-dir={cache}"]
        seconds = _timed(root, args, origin.parent / f"{name}.log", _cli_env())
        builds.append((_outputs(root / "dist"), seconds))
    (first, _), (good, seconds) = builds
    assert first == good, "two uninterrupted builds differ"
    assert [name.partition("/")[0] for name in good] == ["wheels"] * 3 + ["zipapps"] * 2, good
    warm = origin.parent / "warm-cache"
    shutil.copytree(cache, warm)
    for entry in (warm / "v1" / "actions").glob("*.json"):
        outputs = json.loads(entry.read_text())["outputs"]
        if outputs[0]["path"].startswith("dist/zipapps/meshctl-"):
            entry.unlink()
            (warm / "v1" / "blobs" / outputs[0]["sha256"]).unlink()
    keys = frozenset(p.stem for p in (warm / "v1" / "actions").glob("*.json"))
    assert len(keys) == len(good) - 1  # one output per action
    return Tiny(origin, good, seconds, warm, keys)


def _assert_recovered(root: Path, good: dict[str, str], cache: Path, trial: int) -> CacheState:
    assert _outputs(root / "dist") == good, f"trial {trial}: outputs differ after recovery"
    assert not list((root / "dist").rglob(f"{TEMP_PREFIX}*")), f"trial {trial}: temps in dist"
    state = _cache_state(cache)
    assert state.problems == (), f"trial {trial}: {state.problems}"
    assert len(state.entries) == len(good), f"trial {trial}: the cache lacks entries"
    assert state.temporaries == 0, f"trial {trial}: the cache kept a killed run's temporaries"
    return state


def _stored(cache: Path, count: int) -> Callable[[], bool]:
    """Whether the cache holds all `count` entries (the last write is over)."""
    return lambda: len(list((cache / "v1" / "actions").glob("*.json"))) == count


def _big_zipapp(root: Path, tiny: Tiny) -> Path:
    """meshctl's zipapp, which carries the payload: the longest cache write."""
    return root / "dist" / next(n for n in tiny.good if n.startswith("zipapps/meshctl-"))
