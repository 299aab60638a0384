"""The CLI edge: exit codes, messages, dry runs, and the invoke tasks over it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shipyard.cli import main

REPO = Path(__file__).resolve().parents[3]
MANIFEST = """\
schema: 1
project: {name: demo, version: "1.0"}
groups:
  standard: [app]
binaries:
  app: {source: app, entrypoint: "app:main", host: [linux]}
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "pyproject.toml").write_text("[project]\nname = 'app'\n")
    (tmp_path / "binaries.yaml").write_text(MANIFEST)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")  # the manifest is found in a parent, as nox does
    return tmp_path


def test_check_finds_the_manifest_in_a_parent(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check"]) == 0
    assert "ok, 1 binaries, 1 projects; groups: all, standard" in capsys.readouterr().out


def test_dry_run_prints_the_plan_and_builds_nothing(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["build", "--target=standard", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [a["id"] for a in plan["actions"]] == ["wheel:app"]
    assert not (project / "dist").exists()


def test_typo_in_target_exits_2_with_a_suggestion(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["build", "--target=standrd"]) == 2
    err = capsys.readouterr().err
    assert "--target=standrd" in err and "did you mean 'standard'?" in err


def test_missing_manifest_is_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["check"]) == 2
    assert "no binaries.yaml" in capsys.readouterr().err
    assert main(["-f", str(tmp_path / "nope.yaml"), "check"]) == 2


def test_bad_jobs_is_exit_2(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "-j", "0"]) == 2
    assert "-j 0" in capsys.readouterr().err


def test_schema_is_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert "binaries" in schema["required"]


def test_clean_removes_dist(project: Path) -> None:
    (project / "dist" / "wheels").mkdir(parents=True)
    assert main(["clean"]) == 0
    assert not (project / "dist").exists()


def test_python_dash_m_and_invoke_agree(project: Path) -> None:
    env = {**os.environ, "NO_COLOR": "1"}
    via_module = subprocess.run(
        [sys.executable, "-m", "shipyard", "plan", "--target", "standrd"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert via_module.returncode == 2
    assert "did you mean 'standard'?" in via_module.stderr
    assert "Traceback" not in via_module.stderr
    via_invoke = subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "--search-root",
            str(REPO),
            "build",
            "--target=standrd",
            "--file",
            str(project / "binaries.yaml"),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert via_invoke.returncode == 2, via_invoke.stderr
    assert "did you mean 'standard'?" in via_invoke.stderr


def test_library_warnings_such_as_retries_reach_stderr_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import logging

    from shipyard import cli

    cli._log_to_stderr()
    cli._log_to_stderr()  # idempotent: main() runs it on every call
    logging.getLogger("shipyard._http.transport").warning("retry 1 of 3 in 0.5 s: 503")
    logging.getLogger("shipyard._http.transport").info("not shown")
    err = capsys.readouterr().err
    assert err == "shipyard: retry 1 of 3 in 0.5 s: 503\n"


def test_the_tool_version_is_the_installed_distributions() -> None:
    """shipyard reads its own METADATA (fast); it must agree with importlib.metadata."""
    from importlib.metadata import version

    import shipyard

    assert shipyard.__version__ == version("shipyard")
    for flag in ("--version", "--tool-version"):
        done = subprocess.run(
            [sys.executable, "-m", "shipyard", flag],
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stdout.strip() == f"shipyard {version('shipyard')}"
