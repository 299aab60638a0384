"""Reading the graph of a 20-member workspace whose members' requirements are dynamic.

Every member is a hatchling project whose `hatch_build.py` metadata hook writes its
dependencies and extras (`dynamic = ["dependencies", "optional-dependencies"]`): a chain
m01 -> m00, m02 -> m01, ..., and every fifth member reaching m00 through an extra as
well. Measured in one run:

- the graph (`load_workspace` + the closure and dependents of every member) without a
  uv.lock: cold (a fresh shipyard cache: one PEP 517 metadata run for all members) and
  warm (answers cached by each member's files, hashes remembered by stat): target warm
  under 0.1 s;
- the same with a uv.lock (the lock records the dynamic requirements: no backend);
- `shipyard plan` and a no-op `shipyard build` of every binary, warm, as processes:
  target for the no-op at most 0.3 s (issue 28).

hatchling comes from the package index through uv's own client. Run by `nox -s bench`.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BenchError, format_table, timed

from shipyard.files.statcache import StatMemo
from shipyard.workspace import load_workspace

MEMBERS = 20
RUNS = int(os.environ.get("BENCH_RUNS", "5"))
TARGET_WARM = 0.1
TARGET_NOOP = 0.3  # seconds: a no-op `shipyard build` of the workspace (issue 28)
_HOOK = """\
from hatchling.metadata.plugin.interface import MetadataHookInterface


class CustomMetadataHook(MetadataHookInterface):
    def update(self, metadata):
        metadata["dependencies"] = {deps!r}
        metadata["optional-dependencies"] = {extras!r}
"""


def _workspace(root: Path) -> None:
    members = [f"m{i:02d}" for i in range(MEMBERS)]
    (root / "pyproject.toml").write_text(
        '[project]\nname = "bench"\nversion = "0"\nrequires-python = ">=3.11"\n'
        '[tool.uv]\npackage = false\n[tool.uv.workspace]\nmembers = ["members/*"]\n'
        "[tool.uv.sources]\n" + "".join(f"{m} = {{ workspace = true }}\n" for m in members)
    )
    for i, name in enumerate(members):
        home = root / "members" / name
        (home / "src" / name).mkdir(parents=True)
        (home / "src" / name / "__init__.py").write_text("def main() -> int:\n    return 0\n")
        deps = [members[i - 1]] if i else []
        extras = {"base": [members[0]]} if i and i % 5 == 0 else {}
        (home / "hatch_build.py").write_text(_HOOK.format(deps=deps, extras=extras))
        sources = "".join(f"{d} = {{ workspace = true }}\n" for d in {*deps, members[0]} - {name})
        (home / "pyproject.toml").write_text(
            f'[project]\nname = "{name}"\nversion = "1.0"\nrequires-python = ">=3.11"\n'
            'dynamic = ["dependencies", "optional-dependencies"]\n\n'
            '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
            "[tool.hatch.metadata.hooks.custom]\n\n"
            f'[tool.hatch.build.targets.wheel]\npackages = ["src/{name}"]\n\n'
            f"[tool.uv.sources]\n{sources}"
        )
    (root / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: bench, version: '1.0'}\nbinaries:\n"
        f"  last: {{source: members/{members[-1]}, entrypoint: '{members[-1]}:main',"
        " outputs: [wheel]}\n"
        f"  fifth: {{source: members/{members[5]}, entrypoint: '{members[5]}:main',"
        " extras: [base], outputs: [wheel]}\n"
    )
    for command in (["git", "init", "-q"], ["git", "add", "-A"],
                    ["git", "-c", "user.name=b", "-c", "user.email=b@b.invalid",
                     "commit", "-qm", "bench"]):  # fmt: skip
        subprocess.run(command, cwd=root, check=True, capture_output=True)


def _graph(root: Path, cache: Path, memo: Path | None) -> float:
    start = time.perf_counter()
    stat_memo = StatMemo(memo, settle_ns=0) if memo else None
    ws = load_workspace(root, cache_dir=cache, memo=stat_memo)
    for key in ws.projects:
        ws.closure(key, ws.projects[key].extras)
        ws.dependents(key)
    elapsed = time.perf_counter() - start
    if stat_memo is not None:
        stat_memo.save()
    last = ws.projects[f"m{MEMBERS - 1:02d}"]
    if len(ws.closure(last.key)) != MEMBERS - 1:
        raise BenchError(f"the graph is wrong: {last.key} reaches {len(ws.closure(last.key))}")
    return elapsed


def main() -> int:
    """Print the table; exit 1 only when a step fails to run."""
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    rows: list[list[str]] = []
    missed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-graph-") as tmp:
        root = Path(tmp) / "repo"
        root.mkdir()
        _workspace(root)
        for lock in (False, True):
            if lock:
                timed([uv, "lock", "--quiet"], cwd=str(root))
            cache = Path(tmp) / f"cache-{lock}"
            memo = Path(tmp) / f"memo-{lock}.json"
            cold = _graph(root, cache, memo)
            warm = statistics.median(_graph(root, cache, memo) for _ in range(RUNS))
            label = "with uv.lock" if lock else "no lock (PEP 517)"
            verdict = "ok" if warm < TARGET_WARM else "MISSED"
            if warm >= TARGET_WARM:
                missed.append(label)
            rows.append([f"graph, {label}", f"{cold:.3f}", f"{warm:.3f}",
                         f"< {TARGET_WARM} s {verdict}"])  # fmt: skip
        env = {**os.environ, "SHIPYARD_CACHE_DIR": str(Path(tmp) / "shipyard-cache")}
        # Bytecode written, as a user's runs have it: without, every start recompiles
        # shipyard and the no-op measures the compiler.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        command = [sys.executable, "-m", "shipyard"]
        cold_plan = timed([*command, "plan"], env=env, cwd=str(root))[0]
        warm_plan = statistics.median(
            timed([*command, "plan"], env=env, cwd=str(root))[0] for _ in range(RUNS)
        )
        rows.append(["shipyard plan (process)", f"{cold_plan:.3f}", f"{warm_plan:.3f}", ""])
        first = timed([*command, "build"], env=env, cwd=str(root))[0]
        noop = statistics.median(
            timed([*command, "build"], env=env, cwd=str(root))[0] for _ in range(RUNS)
        )
        verdict = "ok" if noop <= TARGET_NOOP else "MISSED"
        if noop > TARGET_NOOP:
            missed.append("no-op shipyard build")
        rows.append(["shipyard build (no-op, warm)", f"{first:.3f}", f"{noop:.3f}",
                     f"<= {TARGET_NOOP} s {verdict}"])  # fmt: skip
    print(f"workspace graph: {MEMBERS} members with dynamic requirements, median of {RUNS}")
    print(format_table(["measure", "cold s", "warm s", "target"], rows))
    if missed:
        print(f"MISSED: {', '.join(missed)}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as error:
        print(f"bench failed: {error}", file=sys.stderr)
        sys.exit(1)
