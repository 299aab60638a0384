"""Benchmark: the action cache's size across commits, this layout against the old one.

    python benchmarks/cache.py [--commits 4] [--old-ref e3c054d]

Two clones of this repository's example workspace build mesh-agent and meshctl
(wheel, zipapp and image: three variants and two platforms for mesh-agent) at a
first commit and then at each of N commits that edit mesh-agent's code, one clone
with this checkout's shipyard and one with the shipyard of `--old-ref` (before the
image archives were stored in pieces), each with its own empty cache and the
automatic prune off. After each build it prints both caches' sizes (the parts builds
write), then `shipyard cache info` of the new one. Target: after the last commit the
new cache is at most 0.5x the old one (it was 814 MB after six builds of two binaries).

Needs the base layouts scripts/services.sh makes ($SHIPYARD_BASE_LAYOUT and its
-debug and -distroless siblings); nothing leaves loopback.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import BenchError, Target, format_table, timed

REPO = Path(__file__).resolve().parents[1]
BINARIES = "mesh-agent,meshctl"
EDITED = Path("examples/mesh/agent/src/meshagent/main.py")
PARTS = ("v1", "oci", "manifests", "metadata", "sdist-wheels")  # what builds write


def _git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z"}
    env.update(GIT_COMMITTER_DATE=env["GIT_AUTHOR_DATE"])
    return timed(
        ["git", "-c", "user.name=bench", "-c", "user.email=b@x", *args], env=env, cwd=str(cwd)
    )[1]


def _clone(ref: str, where: Path, base: Path) -> Path:
    """A clone of this repository at `ref`, with the base layouts where binaries.yaml
    looks for them."""
    _git("clone", "--quiet", str(REPO), str(where), cwd=REPO)
    _git("checkout", "--quiet", ref, cwd=where)
    (where / ".shipyard").mkdir(exist_ok=True)
    (where / ".shipyard" / "base").symlink_to(base)
    return where


def _size(cache: Path) -> int:
    """Bytes of the parts builds write, each file once (hard links counted once)."""
    seen: set[int] = set()
    total = 0
    for part in PARTS:
        for folder, _, names in os.walk(cache / part):
            for name in names:
                st = os.lstat(os.path.join(folder, name))
                if st.st_ino not in seen:
                    seen.add(st.st_ino)
                    total += st.st_size
    return total


def _build(workspace: Path, src: Path, cache: Path) -> float:
    env = {
        **os.environ,
        "PYTHONPATH": str(src),
        "SHIPYARD_CACHE_DIR": str(cache),
        "SHIPYARD_CACHE_MAX_SIZE": "off",
    }
    command = [sys.executable, "-m", "shipyard", "build", "--binary", BINARIES, "-j2"]
    return timed(command, env=env, cwd=str(workspace))[0]


def _edit(workspace: Path, commit: int) -> None:
    path = workspace / EDITED
    path.write_text(path.read_text() + f"\n# edit {commit}\n")
    _git("commit", "--quiet", "-am", f"edit {commit}", cwd=workspace)


def main() -> int:
    """Build both layouts across the commits and print the sizes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=4, help="edited commits after the first")
    parser.add_argument("--old-ref", default="e3c054d", help="the old layout's commit")
    args = parser.parse_args()
    layout = os.environ.get("SHIPYARD_BASE_LAYOUT", str(REPO / ".shipyard/base/python-3.11"))
    base = Path(layout).parent
    if not (base / "python-3.11").is_dir():
        raise BenchError(f"no base layouts in {base}: run scripts/services.sh")
    head = _git("rev-parse", "HEAD", cwd=REPO).strip()
    with tempfile.TemporaryDirectory(prefix="shipyard-cache-bench-") as tmp:
        root = Path(tmp)
        old_src = _clone(args.old_ref, root / "old-shipyard", base) / "src"
        runs = {
            "old": (_clone(head, root / "old-ws", base), old_src, root / "old-cache"),
            "new": (_clone(head, root / "new-ws", base), REPO / "src", root / "new-cache"),
        }
        rows: list[list[str]] = []
        for commit in range(args.commits + 1):
            sizes: dict[str, int] = {}
            for name, (workspace, src, cache) in runs.items():
                if commit:
                    _edit(workspace, commit)
                _build(workspace, src, cache)
                sizes[name] = _size(cache)
            row = [
                "first build" if commit == 0 else f"edit {commit}",
                f"{sizes['old'] / 1e6:.1f} MB",
                f"{sizes['new'] / 1e6:.1f} MB",
                f"{sizes['new'] / sizes['old']:.2f}x",
            ]
            rows.append(row)
            print("  ".join(row), flush=True)
        print()
        print(format_table(["after", "old layout", "new layout", "new/old"], rows))
        last = sizes["new"] / sizes["old"]
        print(Target("cache size after the last commit", last, 0.5).line())
        new_ws, new_src, new_cache = runs["new"]
        env = {**os.environ, "PYTHONPATH": str(new_src), "SHIPYARD_CACHE_DIR": str(new_cache)}
        info = subprocess.run(
            [sys.executable, "-m", "shipyard", "cache", "info"],
            env=env,
            cwd=new_ws,
            capture_output=True,
            text=True,
            check=False,
        )
        print(info.stdout + info.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
