"""Benchmark: the example suite restored from each shared cache, against a local build.

    python benchmarks/remote_cache.py [--protocols oci,http,grpc] [--cache URL ...]

The example suite (every binary of binaries.yaml: wheels, zipapps and images) is
built cold in a clone with no shared cache, then in a second clone from that
clone's local cache (the local figures). Then, for each shared cache: built cold
in a first clone that fills it (read-write), then in a second clone with an empty
local cache that restores every output from it. Each row shows the wall time,
how many actions were built and restored, and what went over the wire (from
report.json's `cache.remote`).

Servers: each protocol of --protocols gets a server of its own on a free
127.0.0.1 port from tests/integration/_shared_caches.py (oci: a CNCF distribution
registry; http: nginx with WebDAV; grpc: a cache-only BuildGrid); a protocol whose
server is not installed is listed as skipped with the reason. `--cache URL`
(repeatable) adds a cache server that is already running. Target: restoring from
a shared cache takes at most 0.5x the cold build. Nothing leaves loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from _common import BenchError, Target, format_table, timed

REPO = Path(__file__).resolve().parents[1]
PROTOCOLS = ("oci", "http", "grpc")
RESTORE_TARGET = 0.5  # restoring from a shared cache / the cold build


@dataclass(frozen=True)
class Run:
    """One build: its wall time, its actions by status, and the shared cache's figures."""

    label: str
    seconds: float
    built: int
    cached: int
    remote: dict[str, object] | None

    def row(self) -> list[str]:
        """The table row: time, actions, and the bytes and requests of the shared cache."""
        remote = self.remote or {}

        def megabytes(name: str) -> str:
            value = remote.get(name)
            return f"{int(value) / 1e6:.1f} MB" if isinstance(value, int) else "-"

        calls = remote.get("calls")
        return [
            self.label,
            f"{self.seconds:.1f} s",
            str(self.built),
            str(self.cached),
            megabytes("bytes_down"),
            megabytes("bytes_up"),
            str(calls) if isinstance(calls, int) else "-",
        ]


def _env() -> dict[str, str]:
    """A CI build of this checkout's shipyard, the base images from the local layouts."""
    env = {**os.environ, "CI": "1", "PYTHONPATH": str(REPO / "src")}
    env["SHIPYARD_CACHE_MAX_SIZE"] = "off"
    layout = os.environ.get("SHIPYARD_BASE_LAYOUT") or str(REPO / ".shipyard/base/python-3.11")
    if not Path(layout).is_dir():
        raise BenchError(f"no base layout at {layout}: run scripts/services.sh --base")
    env["BASE_IMAGE"] = f"oci-layout:{layout}"
    return env


def _build(label: str, root: Path, cache: Path, *flags: str) -> Run:
    command = [sys.executable, "-m", "shipyard", "build", f"--cache-dir={cache}", *flags]
    started = time.perf_counter()
    timed(command, env=_env(), cwd=str(root))
    seconds = time.perf_counter() - started
    report = json.loads((root / "dist" / "report.json").read_text())
    statuses = [a["status"] for a in report["actions"]]
    remote = (report.get("cache") or {}).get("remote")
    return Run(label, seconds, statuses.count("built"), statuses.count("cached"), remote)


def _clone(origin: Path, where: Path) -> Path:
    timed(["git", "clone", "--quiet", str(origin), str(where)])
    return where


@contextmanager
def _servers(protocols: list[str], urls: list[str], folder: Path) -> Iterator[list[str]]:
    """The cache URLs to measure: a server of each protocol started here, then `urls`;
    prints why a protocol is skipped."""
    sys.path.insert(0, str(REPO))
    from tests.integration._shared_caches import STARTERS, missing

    found: list[str] = []
    with ExitStack() as stack:
        for protocol in protocols:
            why = missing(protocol)
            if why is not None:
                print(f"skipped {protocol}://: {why}", flush=True)
                continue
            start, _ = STARTERS[protocol]
            found.append(stack.enter_context(start(folder / f"{protocol}-server")).url)
        yield found + urls


def main() -> int:
    """Build the suite locally and through each shared cache; print the table and targets."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--protocols",
        default=",".join(PROTOCOLS),
        help="start a server of each of these protocols (default: oci,http,grpc)",
    )
    parser.add_argument(
        "--cache", action="append", default=[], metavar="URL", help="a running cache too"
    )
    args = parser.parse_args()
    protocols = [p for p in args.protocols.split(",") if p]
    sys.path.insert(0, str(REPO))
    from tests.integration._repo import copy_worktree

    with tempfile.TemporaryDirectory(prefix="shipyard-remote-bench-") as tmp:
        root = Path(tmp)
        origin = copy_worktree(root / "origin")
        local = root / "local-cache"
        cold = _build("local: cold build", _clone(origin, root / "local-1"), local)
        runs = [
            cold,
            _build("local: clean clone, local cache", _clone(origin, root / "local-2"), local),
        ]
        print(f"local builds: {cold.seconds:.1f} s cold", flush=True)
        targets: list[Target] = []
        with _servers(protocols, args.cache, root) as urls:
            for n, url in enumerate(urls):
                scheme = url.partition("://")[0]
                fill = _clone(origin, root / f"fill-{n}")
                runs.append(
                    _build(
                        f"{scheme}: cold build, storing",
                        fill,
                        root / f"fill-{n}-c",
                        f"--cache={url}",
                    )
                )
                again = _clone(origin, root / f"restore-{n}")
                restored = _build(
                    f"{scheme}: clean clone, empty local cache",
                    again,
                    root / f"restore-{n}-c",
                    f"--cache={url}",
                )
                runs.append(restored)
                if restored.built:
                    raise BenchError(
                        f"{url}: {restored.built} actions built in the restoring clone"
                    )
                targets.append(
                    Target(
                        f"{scheme} restore / cold", restored.seconds / cold.seconds, RESTORE_TARGET
                    )
                )
                print(f"{url}: restored in {restored.seconds:.1f} s", flush=True)
    print()
    headers = ["run", "time", "built", "restored", "down", "up", "requests"]
    print(format_table(headers, [r.row() for r in runs]))
    print()
    for target in targets:
        print(target.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
