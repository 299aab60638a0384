"""dist/ holds what the last build made (issue 25, item 7).

Regression: each new development version left the previous one beside it, so
`dist/zipapps/app-*.pyz` grew by one file per commit and a glob picked any of them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit._dynamic import backend_index, backend_wheels, git_commit, offline, static_member

__all__ = ["backend_wheels"]  # the session fixture, used by name


@pytest.fixture
def repo(tmp_path: Path, backend_wheels: list[Path]) -> tuple[Path, dict[str, str]]:
    index = backend_index(tmp_path / "index", backend_wheels)
    root = tmp_path / "repo"
    for folder, name in (("a", "app-a"), ("b", "app-b")):
        static_member(root, folder, name, [])
        pyproject = root / folder / "pyproject.toml"
        pyproject.write_text(
            pyproject.read_text().replace('version = "1.0"', 'dynamic = ["version"]')
            + '\n[tool.hatch.version]\nsource = "env"\nvariable = "SHIPYARD_VERSION"\n'
        )
    (root / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: r, version: git}\nbinaries:\n"
        "  a: {source: a, entrypoint: 'app_a:NAME', outputs: [wheel, zipapp],"
        " platforms: [linux/amd64]}\n"
        "  b: {source: b, entrypoint: 'app_b:NAME', outputs: [zipapp], platforms: [linux/amd64]}\n"
    )
    (root / ".gitignore").write_text("/dist/\n")
    git_commit(root)
    env = {**offline(index, tmp_path / "uv-cache"), "SHIPYARD_CACHE_DIR": str(tmp_path / "c")}
    return root, env


def _build(root: Path, env: dict[str, str], *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "shipyard", "build", *args], cwd=root, env=env,
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def _names(root: Path, folder: str) -> list[str]:
    return sorted(p.name for p in (root / "dist" / folder).iterdir())


def test_a_new_version_replaces_the_last_one_and_nothing_else(
    repo: tuple[Path, dict[str, str]],
) -> None:
    root, env = repo
    _build(root, env)
    first = _names(root, "zipapps")
    assert len(first) == 2 and all(n.endswith(".pyz") for n in first)
    mine = root / "dist" / "zipapps" / "notes.txt"
    mine.write_text("a file of mine\n")
    for folder in ("a", "b"):
        (root / folder / "README").write_text("changed\n")
    git_commit(root, "both change")
    _build(root, env, "--binary", "a")  # only a: b's zipapp stays as it was
    after_a = _names(root, "zipapps")
    assert len(after_a) == 3 and "notes.txt" in after_a
    assert [n for n in after_a if n.startswith("b-")] == [n for n in first if n.startswith("b-")]
    assert [n for n in after_a if n.startswith("a-")] != [n for n in first if n.startswith("a-")]
    assert len([n for n in _names(root, "wheels") if n.startswith("app_a-")]) == 1
    _build(root, env)  # b's new version replaces its old one
    final = _names(root, "zipapps")
    assert len(final) == 3 and "notes.txt" in final
    assert not set(first) & set(final)
    # A cache hit of the earlier commit's outputs restores them and removes the newer.
    subprocess.run(["git", "-C", str(root), "checkout", "-q", "HEAD~1"], check=True)
    _build(root, env)
    assert sorted(_names(root, "zipapps")) == sorted([*first, "notes.txt"])
