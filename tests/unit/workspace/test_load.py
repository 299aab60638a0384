"""shipyard.workspace._load: loading a large repository."""

from __future__ import annotations

import time
from pathlib import Path

from shipyard.workspace import load_workspace
from tests.unit.workspace.test_projects import project


def test_a_thousand_projects_load_fast(tmp_path: Path) -> None:
    count = 1000
    for i in range(count):
        deps = [f"pkg-{(i * 7 + k * 13) % count:04d}" for k in range(1 + i % 3) if i > 0]
        deps = [d for d in deps if d < f"pkg-{i:04d}"]  # only older ones: no cycles
        project(tmp_path / f"pkgs/p{i:04d}", f"pkg-{i:04d}", [*deps, "requests>=2"])
    started = time.perf_counter()
    ws = load_workspace(tmp_path)
    loaded = time.perf_counter() - started
    for key in ws.projects:
        ws.closure(key)
    ws.dependents("pkg-0000")
    total = time.perf_counter() - started
    print(
        f"\nload_workspace of {count} projects: {loaded:.3f} s; with every closure: {total:.3f} s"
    )
    assert len(ws.projects) == count
    assert loaded < 2.0
