"""An in-repo name in `[build-system].requires` is a problem of its project (exit 2 naming
the requirement), never a package the wheel build takes from the index.

Regression (security review, item 1, dependency confusion through build requirements):
`app` with `requires = ["setuptools", "acme-hooks"]`, `acme-hooks` being a project of the
repository, was built by `python -m build` in an isolated environment, which installed
`acme-hooks` from the index (whoever published that name there) and ran it. `check`,
`plan` and `build --dry-run` said nothing.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shipyard.workspace import WorkspaceError, load_workspace
from tests.reliability import record
from tests.unit.workspace.test_workspace_cli import _ENV, shipyard

# Spelled as people do: the name is compared PEP 503-normalised, with a version and a marker.
REQUIRES = '["setuptools>=61", "Acme_Hooks >= 1.0 ; python_version >= \'3\'"]'


def _project(folder: Path, name: str, deps: list[str], requires: str = "") -> None:
    module = folder / name.replace("-", "_")
    module.mkdir(parents=True)
    (module / "__init__.py").write_text("def main() -> None: ...\n")
    listed = ", ".join(f'"{d}"' for d in deps)
    build = (
        f'[build-system]\nrequires = {requires}\nbuild-backend = "setuptools.build_meta"\n\n'
        if requires
        else ""
    )
    (folder / "pyproject.toml").write_text(
        f'{build}[project]\nname = "{name}"\nversion = "1.0"\ndependencies = [{listed}]\n'
    )


def _repo(tmp_path: Path) -> Path:
    """Binaries `app` (needs `lib`, whose build requires the in-repo `acme-hooks`) and
    `other` (needs nothing broken), `legacy` (a setup.py source whose build requires
    `acme-hooks`), and the project `acme-hooks`. Committed."""
    root = tmp_path / "repo"
    _project(root / "apps" / "app", "app", ["lib"])
    _project(root / "libs" / "lib", "lib", [], REQUIRES)
    _project(root / "tools" / "hooks", "acme-hooks", [])
    _project(root / "apps" / "other", "other", [])
    # A setup.py project: its pyproject.toml has [build-system] and no [project].
    (root / "apps" / "legacy" / "legacy").mkdir(parents=True)
    (root / "apps" / "legacy" / "legacy" / "__init__.py").write_text("def main() -> None: ...\n")
    (root / "apps" / "legacy" / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    (root / "apps" / "legacy" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["acme-hooks"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    (root / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: r, version: '1.0'}\n"
        "defaults: {outputs: [wheel, zipapp], platforms: [linux/amd64]}\nbinaries:\n"
        "  app: {source: apps/app, entrypoint: 'app:main'}\n"
        "  other: {source: apps/other, entrypoint: 'other:main'}\n"
        "  legacy: {source: apps/legacy, entrypoint: 'legacy:main'}\n"
    )
    for args in (("init", "-q"), ("add", "-A"), ("commit", "-q", "-m", "one")):
        subprocess.run(["git", *args], cwd=root, env=_ENV, check=True, capture_output=True)
    return root


# The requirement is the second string of line 2 of libs/lib/pyproject.toml.
PLACE = "libs/lib/pyproject.toml:2:"


def _says_why_and_the_fix(text: str) -> None:
    assert PLACE in text, text
    assert "Acme_Hooks" in text and "acme-hooks" in text, text
    assert "isolated environment" in text and "from the index" in text, text
    assert "backend-path" in text and "publish it to your index under a name" in text, text


def test_the_graph_records_the_problem_on_the_project_that_requires_it(
    tmp_path: Path,
) -> None:
    """Bug: `[build-system].requires` was not read; an in-repo name there passed."""
    ws = load_workspace(_repo(tmp_path))
    requires = (tmp_path / "repo" / "libs" / "lib" / "pyproject.toml").read_text()
    column = requires.splitlines()[1].index('"Acme_Hooks') + 1
    with pytest.raises(WorkspaceError) as caught:
        ws.check("app")  # the binary reaches it through its dependency
    assert str(caught.value.where) == f"{PLACE}{column}"
    _says_why_and_the_fix(str(caught.value))
    with pytest.raises(WorkspaceError):
        ws.project_at(Path("libs/lib"))
    # Only its users fail: the other binary and the hooks project itself are fine.
    ws.check("other")
    ws.check("acme-hooks")
    # A source with no [project] table is checked all the same.
    with pytest.raises(WorkspaceError, match=r"apps/legacy/pyproject\.toml:2:13: .*acme-hooks"):
        ws.project_at(Path("apps/legacy"))


@pytest.mark.reliability
@pytest.mark.parametrize(
    "command", [("check",), ("plan", "--binary=app"), ("build", "--dry-run", "--binary=app")]
)
def test_an_in_repo_build_requirement_exits_2_naming_it(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    """Bug: exit 0, and `build` let the isolated build install `acme-hooks` from the index."""
    root = _repo(tmp_path)
    done = shipyard(root, *command)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 2, (done.stdout + done.stderr)[-2000:]
    _says_why_and_the_fix(done.stderr)
    assert not (root / "dist" / "wheels").exists()
    if command[0] != "check":
        # A binary that does not use the project is planned as before.
        other = shipyard(root, command[0], *command[1:-1], "--binary=other")
        assert other.returncode == 0, other.stderr[-2000:]
        # A setup.py source (no [project] table) is refused all the same.
        legacy = shipyard(root, command[0], *command[1:-1], "--binary=legacy")
        assert legacy.returncode == 2, legacy.stderr[-2000:]
        assert "apps/legacy/pyproject.toml:2:13: " in legacy.stderr, legacy.stderr
    record(
        f"an in-repo build requirement through `{' '.join(command)}`",
        area="dependency confusion",
        cases=1,
        injected="a library whose [build-system].requires names another project of the "
        "repository (`Acme_Hooks >= 1.0`, which an isolated build would take from the index)",
        result="exit 2 naming libs/lib/pyproject.toml:LINE:COL, the reason and the fix; "
        "no wheel built"
        + (
            ""
            if command[0] == "check"
            else "; a binary not using the library still plans, a setup.py source whose "
            "build requires the same name exits 2 too"
        ),
        figures={"exit": done.returncode},
    )
