"""The bad workspaces under tests/workspaces/<case>/, each with an expect.json:

    {"file": "apps/tool/pyproject.toml", "line": L, "column": C,   # where the error points
     "message_contains": "...", "hint_contains": "...",
     "uv_rejects": true | false}   # optional: what `uv lock --check --offline` says of it

Each case is copied into a temporary folder that becomes the repository root, loaded
strictly, and its uv.lock (if any) checked: the first error must be the one expected.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from shipyard.workspace import WorkspaceError, check_lock, load_workspace
from tests.unit._workspaces import UV, Index, Uv

CASES = Path(__file__).resolve().parents[2] / "workspaces"
ALL = sorted(p for p in CASES.iterdir() if p.is_dir())
KNOWN = {"file", "line", "column", "message_contains", "hint_contains", "uv_rejects"}


def expect(case: Path) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads((case / "expect.json").read_text(encoding="utf-8"))
    assert set(raw) <= KNOWN, f"{case.name}: unknown keys {set(raw) - KNOWN}"
    return raw


def install(case: Path, tmp_path: Path) -> Path:
    root = tmp_path / case.name
    shutil.copytree(case, root, ignore=shutil.ignore_patterns("expect.json"))
    return root


def test_every_error_of_the_issue_has_a_case() -> None:
    assert {c.name for c in ALL} >= {
        "dependency-cycle",
        "missing-member-folder",
        "workspace-source-not-member",
        "path-source-without-pyproject",
        "duplicate-project-name",
        "requirement-not-in-lock",
        "lock-out-of-date",
    }
    for case in ALL:
        expect(case)
        for lock in case.rglob("uv.lock"):  # committed locks never name a remote registry
            assert "://" not in lock.read_text(), lock


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_case(case: Path, tmp_path: Path) -> None:
    want = expect(case)
    root = install(case, tmp_path)
    with pytest.raises(WorkspaceError) as caught:
        check_lock(load_workspace(root, strict=True))
    error = caught.value
    assert str(error.where) == f"{want['file']}:{want['line']}:{want['column']}", str(error)
    assert want["message_contains"] in error.problem, str(error)
    assert want["hint_contains"] in error.fix, str(error)
    assert str(error).startswith(f"{want['file']}:{want['line']}:{want['column']}: ")


UV_CASES = [c for c in ALL if "uv_rejects" in expect(c)]


@pytest.mark.skipif(UV is None, reason="uv is not installed")
@pytest.mark.parametrize("case", UV_CASES, ids=[c.name for c in UV_CASES])
def test_uv_judges_the_case_as_recorded(case: Path, tmp_path: Path) -> None:
    root = install(case, tmp_path)
    (tmp_path / "index/wheels").mkdir(parents=True)
    index = Index(tmp_path / "index")
    index.refresh()
    uv = Uv(index, tmp_path / "cache")
    done = uv(root, "lock", "--offline", check=False)
    assert (done.returncode != 0) == expect(case)["uv_rejects"], done.stderr
