"""uv and pip see only the settings shipyard passes on purpose (issue 25, item 3).

Regression: resolution ran `uv pip install` with the repository root as its working
directory, so the root's `[tool.uv] constraint-dependencies` entered a hash-checked install
("all requirements must have their versions pinned with ==, but found: ray>=2.55.0"), and
UV_CONSTRAINT or a user's uv.toml would have changed what a binary ships."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from shipyard.process import INSTALLER_SETTINGS, installer_env
from tests.unit._workspaces import UV, needs_uv


def test_only_index_settings_pass_and_config_files_are_off() -> None:
    given = {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "UV_INDEX_URL": "http://127.0.0.1:1/simple",
        "UV_INDEX_INTERNAL_USERNAME": "ci",
        "UV_INDEX_INTERNAL_PASSWORD": "pw",
        "PIP_FIND_LINKS": "/wheels",
        "UV_CONSTRAINT": "c.txt",
        "UV_OVERRIDE": "o.txt",
        "PIP_CONSTRAINT": "c.txt",
        "UV_NO_BINARY": "1",
        "UV_PYTHON": "3.9",
        "UV_CONFIG_FILE": "/elsewhere/uv.toml",
        "PIP_REQUIRE_VIRTUALENV": "1",
        "pip_constraint": "c.txt",
        "SHIPYARD_INDEX_PASSWORD": "secret",
        "SHIPYARD_VERSION": "1.0",
    }
    kept = ("PATH", "HOME", "UV_INDEX_URL", "UV_INDEX_INTERNAL_USERNAME",
            "UV_INDEX_INTERNAL_PASSWORD", "PIP_FIND_LINKS", "SHIPYARD_VERSION")  # fmt: skip
    assert installer_env(given) == {
        **{name: given[name] for name in kept},
        "UV_NO_CONFIG": "1",
        "PIP_CONFIG_FILE": os.devnull,
    }
    assert not any("CONSTRAINT" in name or "OVERRIDE" in name for name in INSTALLER_SETTINGS)


@needs_uv
def test_uv_reads_no_configuration_under_it(tmp_path: Path) -> None:
    """The real uv, in a folder whose pyproject.toml and uv.toml name an index no one can
    reach: as the user runs it, it asks that index; with `installer_env` it asks only the
    one shipyard passes."""
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\nversion = "1"\n[tool.uv]\nindex-url = "http://127.0.0.1:9/a"\n'
    )
    (tmp_path / "uv.toml").write_text('index-url = "http://127.0.0.1:9/b"\n')
    assert UV is not None
    base = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path),
            "UV_CACHE_DIR": str(tmp_path / "cache")}  # fmt: skip

    def asked(env: dict[str, str]) -> str:
        done = subprocess.run(
            [UV, "pip", "compile", "--no-header", "-"], input="alpha\n", cwd=tmp_path,
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode != 0  # no index answers
        return done.stderr

    assert "127.0.0.1:9/b" in asked(base)
    said = asked(installer_env({**base, "UV_INDEX_URL": "http://127.0.0.1:8/simple"}))
    assert "127.0.0.1:8/simple" in said and "127.0.0.1:9" not in said
