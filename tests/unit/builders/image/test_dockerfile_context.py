"""What a Dockerfile build sends as its context (issue 12, item 6, and its review)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shipyard.builders.image.dockerfile import context_names


def _repo(root: Path, dockerignore: str) -> Path:
    for name in ("src/a.py", ".github/workflows/ci.yml", "a/b/.gitkeep", "a/b/c.txt", "secret.txt"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x\n")
    (root / "Dockerfile").write_text("FROM scratch\n")
    (root / ".dockerignore").write_text(dockerignore)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    nested = root / "a" / "b" / ".git"
    nested.mkdir()
    (nested / "config").write_text("[core]\n")
    for folder in ("dist/.tmp-x", ".venv/bin", ".nox/test", ".shipyard/base"):
        (root / folder).mkdir(parents=True)
        (root / folder / "f").write_text("x\n")
    return root


@pytest.mark.parametrize(
    "dockerignore",
    [
        "",
        "secret.txt\n!.github/workflows\n",
        "secret.txt\n!a/b/.gitkeep\n",
        "*\n!.git\n!.git/**\n!dist\n!.venv/**\n!src\n",
    ],
    ids=["none", "exception-github", "exception-gitkeep", "exceptions-for-never"],
)
def test_git_and_never_folders_stay_out_whatever_dockerignore_says(
    tmp_path: Path, dockerignore: str
) -> None:
    """Regression: docker-py matched `**/.git` against a parent only when no longer
    than it, so an exception starting with `.git` (`!.github/...`, `!a/b/.gitkeep`)
    sent `.git/config` and `a/b/.git/config` with the build."""
    root = _repo(tmp_path / "repo", dockerignore)
    names = context_names(root, "Dockerfile", dist=root / "dist")
    leaked = [
        n
        for n in names
        if ".git" in n.split("/") or n.split("/")[0] in ("dist", ".venv", ".nox", ".shipyard")
    ]
    assert not leaked, f"sent with the context: {leaked}"
    assert "Dockerfile" in names and "src/a.py" in names
    if "secret.txt" in dockerignore:
        assert "secret.txt" not in names
