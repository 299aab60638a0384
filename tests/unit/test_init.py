"""`shipyard init` writes a first binaries.yaml that `check` accepts (issue 25, item 6)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from tests.integration._repo import copy_worktree
from tests.unit._dynamic import backend_index, backend_wheels, hooked_workspace, offline

__all__ = ["backend_wheels"]  # the session fixture, used by name


def _run(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shipyard", *args], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip


def _scripts(root: Path, members: list[str]) -> dict[str, tuple[str, str]]:
    found = {}
    for member in members:
        data = tomllib.loads((root / member / "pyproject.toml").read_text())
        for script, target in data["project"].get("scripts", {}).items():
            found[script] = (member, target)
    return found


def test_the_example_suite_gets_a_binary_per_script_and_check_passes(tmp_path: Path) -> None:
    root = copy_worktree(tmp_path / "repo")
    (root / "binaries.yaml").unlink()
    done = _run(root, "init")
    assert done.returncode == 0, done.stderr
    written = yaml.safe_load((root / "binaries.yaml").read_text())
    members = [".", *(str(p.parent.relative_to(root)) for p in
                      sorted((root / "examples/mesh").glob("**/pyproject.toml")))]  # fmt: skip
    expected = _scripts(root, members)
    assert {name: (b["source"], b["entrypoint"]) for name, b in written["binaries"].items()} == {
        script: where for script, where in expected.items()
    }
    assert f"{len(expected)} binaries" in done.stdout
    checked = _run(root, "check")
    assert checked.returncode == 0, checked.stderr
    # Never over an existing file.
    before = (root / "binaries.yaml").read_bytes()
    again = _run(root, "init")
    assert again.returncode == 2 and "already exists" in again.stderr
    assert (root / "binaries.yaml").read_bytes() == before


def test_a_workspace_with_dynamic_metadata_and_a_fixture_outside_it(
    tmp_path: Path, backend_wheels: list[Path]
) -> None:
    index = backend_index(tmp_path / "index", backend_wheels)
    root = hooked_workspace(tmp_path / "repo")
    fixture = root / "tests" / "fixtures" / "template"  # a pyproject.toml that is no member
    fixture.mkdir(parents=True)
    (fixture / "pyproject.toml").write_text(
        '[project]\nname = "{{name}}"\nversion = "0"\n[project.scripts]\nx = "tpl:main"\n'
    )
    env = {**offline(index, tmp_path / "uv-cache"), "SHIPYARD_CACHE_DIR": str(tmp_path / "c")}
    done = _run(root, "init", env=env)
    assert done.returncode == 0, done.stderr
    written = yaml.safe_load((root / "binaries.yaml").read_text())["binaries"]
    assert {n: (b["source"], b["entrypoint"]) for n, b in written.items()} == {
        "acme-agent": ("apps/agent", "acme_agent:main"),
        "acme-cli": ("apps/cli", "acme_cli:main"),
    }
    checked = _run(root, "check", env=env)
    assert checked.returncode == 0, checked.stderr


def test_a_script_naming_a_missing_function_is_left_out_with_the_reason(
    tmp_path: Path,
) -> None:
    """As agent-framework's lab package declares `lightning = "..._lightning:main"`
    with no main: init lists the other scripts and says why this one is not there, so
    `check` passes on what init wrote."""
    lab = tmp_path / "packages" / "lab"
    (lab / "lightning" / "acme_lightning").mkdir(parents=True)
    (lab / "lightning" / "acme_lightning" / "__init__.py").write_text("def run(): ...\n")
    (lab / "pyproject.toml").write_text(
        '[project]\nname = "acme-lab"\nversion = "1"\n\n'
        '[project.scripts]\nlightning = "acme_lightning:main"\nrunner = "acme_lightning:run"\n\n'
        '[tool.setuptools.package-dir]\n"acme_lightning" = "lightning/acme_lightning"\n'
    )
    (tmp_path / "pyproject.toml").write_text('[tool.uv.workspace]\nmembers = ["packages/*"]\n')
    done = _run(tmp_path, "init")
    assert done.returncode == 0, done.stderr
    written = yaml.safe_load((tmp_path / "binaries.yaml").read_text())
    assert sorted(written["binaries"]) == ["runner"]
    assert (
        "# not listed: packages/lab: script lightning = 'acme_lightning:main': "
        "module acme_lightning has no main"
    ) in (tmp_path / "binaries.yaml").read_text()
    checked = _run(tmp_path, "check")
    assert checked.returncode == 0, checked.stderr
