"""Test stages of a 100-project uv workspace: affected-only against every project's tests.

The workspace (generated, locked by uv): one library, `common`, used by ten projects,
and 89 projects that use nothing; each has three pytest tests and a dev group with
pytest, so each has a `unit` stage. After every project's stages ran once (the stage
environments exist, as on a CI machine that keeps its cache), each round commits an
edit to `common` and times, in the same run:

- `shipyard test --since HEAD~1`: the stages of `common` and its ten users (11);
- `shipyard test --no-cache`: every project's stages, what a CI without the graph runs;
- `shipyard test` with nothing changed: all cache hits.

pytest comes from the package index through uv's own client. Run by `nox -s bench`.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BenchError, Target, format_table, timed

PROJECTS = 100
USERS = 10
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
TARGET = 0.25  # the affected run costs at most a quarter of running everything
_TESTS = """\
from {module} import value


def test_value() -> None:
    assert value() == {expected}


def test_value_is_stable() -> None:
    assert value() == value()


def test_name() -> None:
    assert "{module}".startswith("p") or "{module}" == "common"
"""


def _project(root: Path, name: str, deps: list[str], code: str, expected: str) -> None:
    home = root / "projects" / name
    (home / "src" / name).mkdir(parents=True)
    (home / "src" / name / "__init__.py").write_text(code)
    (home / "tests").mkdir()
    (home / "tests" / f"test_{name}.py").write_text(_TESTS.format(module=name, expected=expected))
    listed = ", ".join(f'"{d}"' for d in deps)
    (home / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "1.0"\nrequires-python = ">=3.11"\n'
        f"dependencies = [{listed}]\n\n"
        '[dependency-groups]\ndev = ["pytest>=8"]\n\n'
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
        f'[tool.hatch.build.targets.wheel]\npackages = ["src/{name}"]\n'
    )


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=b", "-c", "user.email=b@b.invalid", *args],
        check=True,
        capture_output=True,
    )


def _workspace(root: Path) -> None:
    names = [f"p{i:03d}" for i in range(1, PROJECTS)]
    (root / "pyproject.toml").write_text(
        '[tool.uv.workspace]\nmembers = ["projects/*"]\n\n[tool.uv.sources]\n'
        "common = { workspace = true }\n"
    )
    _project(root, "common", [], "BASE = 1\n\n\ndef value() -> int:\n    return BASE\n", "1")
    for index, name in enumerate(names):
        if index < USERS:
            code = (
                "from common import value as base\n\n\ndef value() -> int:\n    return base() + 1\n"
            )
            _project(root, name, ["common"], code, "2")
        else:
            _project(root, name, [], "def value() -> int:\n    return 7\n", "7")
    (root / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: bench, version: '1.0'}\nbinaries:\n"
        "  first: {source: projects/p001, entrypoint: 'p001:value', outputs: [wheel]}\n"
    )
    (root / ".gitignore").write_text("/dist/\n/.shipyard/\n")
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    subprocess.run([uv, "lock", "--quiet"], cwd=root, check=True, timeout=600)
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "workspace")


def _stages(root: Path) -> list[dict[str, object]]:
    data = json.loads((root / "dist/report.json").read_text())
    return [a for a in data["actions"] if a["kind"] == "test"]


def main() -> int:
    top = Path(tempfile.mkdtemp(prefix="shipyard-bench-stages-"))
    root = top / "repo"
    root.mkdir()
    env = {**os.environ, "SHIPYARD_CACHE_DIR": str(top / "cache"), "CI": "true"}
    shipyard = [sys.executable, "-m", "shipyard", "-f", str(root / "binaries.yaml"), "test"]
    print(f"generating a workspace of {PROJECTS} projects in {root} ...", flush=True)
    _workspace(root)
    first, _ = timed(shipyard, env=env, cwd=str(root))
    print(f"every stage, cold (environments made): {first:.1f}s", flush=True)
    since: list[float] = []
    every: list[float] = []
    noop: list[float] = []
    ran: set[int] = set()
    for run in range(RUNS):
        library = root / "projects/common/src/common/__init__.py"
        library.write_text(library.read_text() + f"\nROUND = {run}\n")
        _git(root, "commit", "-qam", f"common, round {run}")
        seconds, _ = timed([*shipyard, "--since", "HEAD~1"], env=env, cwd=str(root))
        stages = _stages(root)
        projects = {str(s["project"]) for s in stages if s["status"] == "built"}
        ran.add(len(projects))
        if len(projects) != USERS + 1:
            raise BenchError(f"--since ran {len(projects)} projects' stages, not {USERS + 1}")
        since.append(seconds)
        noop.append(timed(shipyard, env=env, cwd=str(root))[0])
        every.append(timed([*shipyard, "--no-cache"], env=env, cwd=str(root))[0])
    rows = [
        ["test --since HEAD~1 (11 projects)", f"{statistics.median(since):.2f}s"],
        [f"test --no-cache (all {PROJECTS})", f"{statistics.median(every):.2f}s"],
        ["test, nothing changed (cache hits)", f"{statistics.median(noop):.2f}s"],
    ]
    print(format_table([f"command (median of {RUNS})", "wall"], rows))
    ratio = statistics.median(since) / statistics.median(every)
    print(Target("since / every project", ratio, TARGET).line())
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
