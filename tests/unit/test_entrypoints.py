"""Entry points are checked where they run, from the files (issue 25, item 5).

Regression: `pydantic_ai._clii:cli_exit` (for `_cli`) passed `check` and `build`, since
only the top-level package was looked for, and the zipapp died with a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shipyard.entrypoints import entrypoint_problem


@pytest.fixture
def site(tmp_path: Path) -> Path:
    files = {
        "pkg/__init__.py": "from pkg._cli import main as run\n",
        "pkg/_cli.py": (
            "import sys\nfrom typing import TYPE_CHECKING\n\nVALUE: int = 1\n"
            "if TYPE_CHECKING:\n    hidden = 1\nelse:\n    shown = 2\n"
            "try:\n    import json as fast\nexcept ImportError:\n    fast = None\n"
            "def cli_exit():\n    return 0\n\nclass App:\n    def run(self): ...\n"
        ),
        "pkg/sub/__init__.py": "",
        "pkg/sub/deep.py": "async def serve(): ...\n",
        "lazy.py": "def __getattr__(name):\n    return name\n",
        "star.py": "from os.path import *\n",
        "native/__init__.py": "",
        "native/_speed.cpython-311-x86_64-linux-gnu.so": "",
        "nsp/part.py": "def go(): ...\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    "entrypoint",
    [
        "pkg._cli:cli_exit", "pkg._cli:App.run", "pkg._cli:VALUE", "pkg._cli:hidden",
        "pkg._cli:shown", "pkg._cli:fast", "pkg:run", "pkg.sub.deep:serve", "pkg:sub",
        "lazy:anything", "star:join", "native._speed:whatever", "nsp.part:go", "pkg._cli",
    ],
)  # fmt: skip
def test_what_python_would_find_is_found(site: Path, entrypoint: str) -> None:
    assert entrypoint_problem(entrypoint, [site], "the site") is None


@pytest.mark.parametrize(
    ("entrypoint", "problem"),
    [
        ("pkg._clii:cli_exit", "no module pkg._clii in the site (did you mean _cli?)"),
        ("pkg._cli:cli_exitt", "module pkg._cli has no cli_exitt (did you mean cli_exit?)"),
        ("pkgg:run", "no module pkgg in the site (did you mean pkg?)"),
        ("pkg.sup.deep:serve", "no module pkg.sup in the site (did you mean sub?)"),
        ("pkg.sub.deeep:serve", "no module pkg.sub.deeep in the site (did you mean deep?)"),
        ("nsp:go", "module nsp has no go"),
    ],
)
def test_what_is_missing_is_named_with_a_guess(site: Path, entrypoint: str, problem: str) -> None:
    assert entrypoint_problem(entrypoint, [site], "the site") == problem


def _check(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shipyard", "check"], cwd=cwd, capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip


def test_check_points_at_the_entrypoint_of_the_binarys_own_source(tmp_path: Path) -> None:
    app = tmp_path / "apps" / "tool"
    (app / "src" / "acme_tool").mkdir(parents=True)
    (app / "src" / "acme_tool" / "__init__.py").write_text("")
    (app / "src" / "acme_tool" / "_cli.py").write_text("def main(): ...\n")
    (app / "pyproject.toml").write_text('[project]\nname = "acme-tool"\nversion = "1"\n')
    manifest = tmp_path / "binaries.yaml"
    text = (
        "schema: 1\nproject: {{name: a, version: '1'}}\nbinaries:\n"
        "  tool:\n    source: apps/tool\n    entrypoint: '{entry}'\n    outputs: [wheel]\n"
        "  black: {{source: apps/tool, entrypoint: 'black:patched_main', outputs: [wheel]}}\n"
    )

    def check(entry: str) -> subprocess.CompletedProcess[str]:
        manifest.write_text(text.format(entry=entry))
        return _check(tmp_path)

    done = check("acme_tool._clii:main")
    assert done.returncode == 2
    assert (
        f"{manifest}:6:17: binaries.tool.entrypoint: acme_tool._clii:main: no module "
        "acme_tool._clii in tool's source (did you mean _cli?)"
    ) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert check("acme_tool._cli:mian").returncode == 2
    # A module of a dependency (black here) is the build's to check: check passes.
    assert check("acme_tool._cli:main").returncode == 0


def test_check_follows_setuptools_package_dir(tmp_path: Path) -> None:
    """agent-framework's lab package maps each package to a folder of its own
    (`"agent_framework_lab_lightning" = "lightning/agent_framework_lab_lightning"`): a
    script naming a function the module lacks is caught by check, not first by the build."""
    lab = tmp_path / "packages" / "lab"
    (lab / "lightning" / "acme_lightning").mkdir(parents=True)
    (lab / "lightning" / "acme_lightning" / "__init__.py").write_text("def run(): ...\n")
    (lab / "code" / "acme_gaia").mkdir(parents=True)
    (lab / "code" / "acme_gaia" / "__init__.py").write_text("def viewer_main(): ...\n")
    (lab / "pyproject.toml").write_text(
        '[project]\nname = "acme-lab"\nversion = "1"\n\n[tool.setuptools.package-dir]\n'
        '"acme_lightning" = "lightning/acme_lightning"\n"" = "code"\n'
    )
    manifest = tmp_path / "binaries.yaml"

    def check(entry: str) -> subprocess.CompletedProcess[str]:
        manifest.write_text(
            "schema: 1\nproject: {name: a, version: '1'}\nbinaries:\n"
            f"  lab: {{source: packages/lab, entrypoint: '{entry}', outputs: [wheel]}}\n"
        )
        return _check(tmp_path)

    done = check("acme_lightning:main")
    assert done.returncode == 2
    assert "acme_lightning:main: module acme_lightning has no main" in done.stderr, done.stderr
    assert check("acme_lightning:run").returncode == 0
    assert check("acme_gaia:viewer_main").returncode == 0
    assert check("acme_gaia:viewer").returncode == 2  # through the "" mapping
