"""A target Python outside uv.lock's requires-python is bad input, said before anything is
built: uv locked nothing for it (found on a real workspace whose lock needs 3.12 and whose
binaries targeted 3.11: the build failed later with "numpy==2.5.1 has no usable wheels")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.unit._workspaces import Uv, needs_uv, standard_index, uv_workspace

pytestmark = needs_uv


def test_a_python_the_lock_does_not_cover_exits_2_at_project_python(tmp_path: Path) -> None:
    uv = Uv(standard_index(tmp_path / "index"), tmp_path / "uv-cache")
    root = uv_workspace(tmp_path / "repo", uv)
    for member in ("libs/common", "apps/tool"):
        pyproject = root / member / "pyproject.toml"
        text = pyproject.read_text()
        start = text.index("requires-python")
        end = text.index("\n", start)
        pyproject.write_text(text[:start] + 'requires-python = ">=3.11,<3.12"' + text[end:])
    uv(root, "lock")
    manifest = (
        "schema: 1\nproject:\n  name: acme\n  version: '1.0'\n  python: '{python}'\n"
        "binaries:\n  tool: {{source: apps/tool, entrypoint: 'acme_tool:main',"
        " outputs: [{output}]}}\n"
    )

    def check(python: str, output: str) -> subprocess.CompletedProcess[str]:
        (root / "binaries.yaml").write_text(manifest.format(python=python, output=output))
        return subprocess.run(
            [sys.executable, "-m", "shipyard", "check"],
            cwd=root, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    done = check("3.12", "zipapp")
    assert done.returncode == 2, done.stderr
    assert f"{root / 'binaries.yaml'}:5:11: project.python: Python 3.12 is outside" in done.stderr
    assert "requires-python (==3.11.*)" in done.stderr and "Traceback" not in done.stderr
    assert check("3.11", "zipapp").returncode == 0
    assert check("3.12", "wheel").returncode == 0  # a wheel installs nothing from the lock
