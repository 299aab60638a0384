"""The workspace root a manifest's paths are read against: the nearest uv workspace."""

from __future__ import annotations

from pathlib import Path

from shipyard.manifest._workspace_root import workspace_root


def _pyproject(folder: Path, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(text)


_WORKSPACE = '[tool.uv.workspace]\nmembers = ["packages/*"]\n'


def test_the_root_is_the_nearest_uv_workspace_up_to_the_git_top(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    python = tmp_path / "python"
    _pyproject(python, _WORKSPACE)
    _pyproject(python / "packages/cli", '[project]\nname = "cli"\n')
    assert workspace_root(python) == python
    assert workspace_root(python / "packages/cli") == python
    assert workspace_root(tmp_path / "docs") == tmp_path / "docs"  # none: its own folder
    _pyproject(tmp_path, _WORKSPACE)
    assert workspace_root(tmp_path / "deploy") == tmp_path
    assert workspace_root(python) == python, "the nearest one"
    # Above the git top is another repository's business.
    inner = tmp_path / "vendor" / "lib"
    (inner / ".git").mkdir(parents=True)
    assert workspace_root(inner) == inner


def test_a_manifest_above_the_workspace_of_its_binaries_is_refused_at_the_source(
    tmp_path: Path,
) -> None:
    """binaries.yaml at the git top with the sources in python/, a uv workspace: its
    uv.lock would silently not be read, so check says where binaries.yaml belongs."""
    import subprocess
    import sys

    (tmp_path / ".git").mkdir()
    python = tmp_path / "python"
    _pyproject(python, _WORKSPACE)
    _pyproject(python / "packages/cli", '[project]\nname = "cli"\nversion = "1"\n')
    (tmp_path / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: acme, version: '1'}\nbinaries:\n"
        "  cli: {source: python/packages/cli, entrypoint: 'cli:main'}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "shipyard", "check"], cwd=tmp_path, capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert (
        f"{tmp_path / 'binaries.yaml'}:4:17: binaries.cli.source: python/packages/cli is in "
        "the uv workspace python/"
    ) in done.stderr, done.stderr
    assert "move binaries.yaml into python/" in done.stderr
    # From the workspace's folder, the same binary is fine.
    (python / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: acme, version: '1'}\nbinaries:\n"
        "  cli: {source: packages/cli, entrypoint: 'cli:main'}\n"
    )
    (tmp_path / "binaries.yaml").unlink()
    done = subprocess.run(
        [sys.executable, "-m", "shipyard", "check"], cwd=python, capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
