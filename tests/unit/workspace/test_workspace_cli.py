"""The workspace through the CLI: every bad workspace of tests/workspaces/ stops `plan`,
`build` and `check` with exit 2 at its file:line:col; `affected` and `--since` refuse
what they cannot do, with the flag and the fix."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.unit.workspace.test_workspace_cases import ALL, expect, install

_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith(("UV_", "GIT_"))},
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t.invalid",
}


def shipyard(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shipyard", *args],
        cwd=root,
        env={**_ENV, "SHIPYARD_CACHE_DIR": str(root.parent / "cache")},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _manifest(root: Path) -> None:
    """A binary for every project of the case, so each problem is on a binary's path."""
    lines = ["schema: 1", "project: {name: case, version: '1.0'}", "binaries:"]
    for number, pyproject in enumerate(sorted(root.rglob("pyproject.toml"))):
        if "project" not in tomllib.loads(pyproject.read_text()):
            continue
        source = pyproject.parent.relative_to(root).as_posix()
        lines.append(f"  b{number}: {{source: {source}, entrypoint: 'x:main',")
        lines.append("    outputs: [wheel, zipapp], platforms: [linux/amd64]}")
    (root / "binaries.yaml").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
@pytest.mark.parametrize("command", [("plan",), ("build", "--dry-run"), ("check",)])
def test_a_bad_workspace_exits_2_at_its_line(
    case: Path, command: tuple[str, ...], tmp_path: Path
) -> None:
    want = expect(case)
    root = install(case, tmp_path)
    _manifest(root)
    done = shipyard(root, *command)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    where = f"{want['file']}:{want['line']}:{want['column']}"
    assert where in done.stderr, done.stderr
    assert want["message_contains"] in done.stderr
    assert want["hint_contains"] in done.stderr


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for name, deps in (("lib", []), ("app", ["lib"]), ("other", [])):
        (root / name / name).mkdir(parents=True)
        (root / name / name / "__init__.py").write_text("def main() -> int:\n    return 0\n")
        listed = ", ".join(f'"{d}"' for d in deps)
        (root / name / "pyproject.toml").write_text(
            f'[project]\nname = "{name}"\nversion = "1.0"\ndependencies = [{listed}]\n'
        )
    (root / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: r, version: git}\n"
        "defaults: {outputs: [wheel, zipapp], platforms: [linux/amd64]}\nbinaries:\n"
        "  app: {source: app, entrypoint: 'app:main'}\n"
        "  other: {source: other, entrypoint: 'other:main'}\n"
    )
    for args in (("init", "-q"), ("add", "-A"), ("commit", "-q", "-m", "one")):
        subprocess.run(["git", *args], cwd=root, env=_ENV, check=True)
    return root


def test_affected_needs_since_and_release_takes_it_only_as_a_snapshot(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    done = shipyard(root, "affected")
    assert done.returncode == 2 and "--since=REF" in done.stderr
    done = shipyard(root, "release", "--since=HEAD", "--dry-run")
    assert done.returncode == 2 and "release --snapshot" in done.stderr
    done = shipyard(root, "plan", "--since=no-such-ref")
    assert done.returncode == 2 and "--since=no-such-ref" in done.stderr
    assert "Traceback" not in done.stderr


def test_since_narrows_plan_and_affected_says_why(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / "lib" / "lib" / "__init__.py").write_text("X = 2\n")  # uncommitted counts
    done = shipyard(root, "affected", "--since=HEAD")
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"app: lib/lib/__init__\.py changed \(through lib\)\n", done.stdout)
    plan = shipyard(root, "plan", "--since=HEAD")
    assert plan.returncode == 0, plan.stderr
    ids = [line.split()[0] for line in plan.stdout.splitlines()]
    assert ids == ["wheel:app", "wheel:lib", "zipapp:app"]
    assert "after wheel:app, wheel:lib" in plan.stdout
    nothing = shipyard(root, "plan", "--since=HEAD", "--binary=other")
    assert nothing.returncode == 0 and nothing.stdout == ""


def test_nothing_affected_succeeds_and_touches_nothing(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / "dist").mkdir()
    (root / "dist" / "report.json").write_text("{}")
    for command in (("build",), ("push",), ("release", "--snapshot")):
        done = shipyard(root, *command, "--since=HEAD")
        assert done.returncode == 0, done.stderr
        assert "nothing affected since HEAD" in done.stderr
    assert (root / "dist" / "report.json").read_text() == "{}"
    assert sorted(p.name for p in (root / "dist").iterdir()) == ["report.json"]


def test_a_snapshot_release_plans_only_the_affected_binaries(tmp_path: Path) -> None:
    from shipyard.release import ReleaseOptions, prepare_release

    root = _repo(tmp_path)
    (root / "other" / "other" / "__init__.py").write_text("X = 3\n")
    options = ReleaseOptions(snapshot=True, cache_dir=tmp_path / "cache")
    ctx = prepare_release(root / "binaries.yaml", options, since="HEAD", env=_ENV)
    assert ctx.plan.binary_names == ("other",)
    assert [a.id for a in ctx.plan.actions] == ["wheel:other", "zipapp:other"]
