"""A selection that leaves nothing to build says why (issue 18, item 7).

`build --binary notes --platform linux/arm64` for an amd64-only binary, or `--output wheel`
for a binary without wheels, used to print nothing and exit 0. Now what was selected and
why nothing remains is printed; naming something (--binary, --output, --platform) that
cannot be built exits 2, as Bazel and Cargo refuse an explicitly named target they cannot
build; groups alone that leave nothing are an outcome (exit 0 with the note), as for a CI
job whose group holds only other hosts' binaries. `--since` with nothing affected keeps
its own message and exit 0.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from shipyard import cli
from shipyard.engine.plan import Selection, host_os, make_plan
from shipyard.errors import UsageError
from shipyard.manifest import load_manifest

HOST = host_os()
OTHER_HOST = "windows" if HOST != "windows" else "linux"


def _manifest(root: Path) -> str:
    return f"""\
schema: 1
project: {{name: demo, version: "1.0"}}
groups:
  elsewhere: [port]
  runnable: [notes]
binaries:
  notes:
    source: notes
    entrypoint: notes.cli:main
    outputs: [zipapp]
    platforms: [linux/amd64]
  tool:
    source: tool
    entrypoint: tool.cli:main
  port:
    source: port
    entrypoint: port.cli:main
    host: [{OTHER_HOST}]
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / ".git").mkdir()
    for name in ("notes", "tool", "port"):
        (tmp_path / name / name).mkdir(parents=True)
        (tmp_path / name / name / "__init__.py").write_text("")
        (tmp_path / name / name / "cli.py").write_text("def main():\n    return 0\n")
        (tmp_path / name / "pyproject.toml").write_text(
            f'[project]\nname = "{name}"\nversion = "1.0"\n'
        )
    (tmp_path / "binaries.yaml").write_text(_manifest(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SHIPYARD_CACHE_DIR", str(tmp_path / ".cache"))
    return tmp_path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", [("build",), ("build", "--dry-run"), ("plan",)])
def test_named_binary_without_the_platform_exits_2_saying_why(
    project: Path, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    code, out, err = _run(capsys, *command, "--binary", "notes", "--platform", "linux/arm64")
    assert code == 2, (out, err)
    assert err.startswith(
        "shipyard: error: nothing to build for --binary=notes --platform=linux/arm64:\n"
        "  notes: no platform left for its zipapp: it builds for linux/amd64; "
        "--platform asked for linux/arm64\n"
    ), err
    assert not (project / "dist").exists()


def test_output_the_binary_does_not_have_exits_2_saying_why(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, "build", "--binary", "notes", "--output", "wheel")
    assert code == 2, err
    assert "notes: no output left: it builds zipapp; --output asked for wheel" in err
    assert not (project / "dist").exists()


def test_a_group_narrowed_by_platform_to_nothing_exits_2(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, "plan", "--target", "runnable", "--platform", "linux/arm64")
    assert code == 2, err
    assert "nothing to build for --target=runnable --platform=linux/arm64:" in err
    assert "notes: no platform left" in err


def test_a_named_binary_left_out_exits_2_even_when_others_build(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(
        capsys, "build", "--dry-run", "--binary", "notes,tool", "--platform", "linux/arm64"
    )
    assert code == 2, (out, err)
    assert "cannot build notes:" in err
    assert "notes: no platform left for its zipapp" in err
    assert out == ""


def test_a_group_member_left_out_is_a_skip_when_others_build(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "build", "--dry-run", "--platform", "linux/arm64")
    assert code == 0, err
    assert "wheel:tool" in out
    assert "skip notes: no platform left for its zipapp" in out


def test_a_group_with_nothing_for_this_host_says_so_and_exits_0(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "build", "--target", "elsewhere")
    assert code == 0, err
    assert err == (
        "nothing to build for --target=elsewhere:\n"
        f"  port: host is {HOST}; port builds only on {OTHER_HOST}\n"
    )
    assert out == ""
    assert not (project / "dist").exists()
    code, out, err = _run(capsys, "plan", "--json", "--target", "elsewhere")
    assert code == 0, err
    assert '"actions": []' in out
    assert "nothing to build for --target=elsewhere" in err


def test_a_named_binary_for_another_host_exits_2(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, "build", "--binary", "port")
    assert code == 2, err
    assert f"port: host is {HOST}; port builds only on {OTHER_HOST}" in err


def test_since_with_nothing_affected_still_exits_0(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / ".git").rmdir()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "one"]):
        subprocess.run(["git", *args], cwd=project, check=True, env={**os.environ, **env})
    code, _, err = _run(
        capsys, "build", "--since", "HEAD", "--binary", "notes", "--platform", "linux/arm64"
    )
    assert code == 0, err
    assert err == "nothing affected since HEAD\n"


def test_the_plan_records_why_a_binary_builds_nothing(project: Path) -> None:
    from shipyard.engine.selecting import unbuildable

    manifest = load_manifest(project / "binaries.yaml", env={})
    wheels = Selection(outputs=("wheel",))
    plan = make_plan(manifest, wheels, HOST)
    assert [(s.binary, s.reason) for s in plan.skips] == [
        ("port", f"host is {HOST}; port builds only on {OTHER_HOST}"),
        ("notes", "no output left: it builds zipapp; --output asked for wheel"),
    ]
    assert [a.id for a in plan.actions] == ["wheel:tool"]
    assert unbuildable(plan, wheels) == ""
    named = Selection(binaries=("notes",), outputs=("wheel",))
    with pytest.raises(UsageError, match="nothing to build for --binary=notes --output=wheel"):
        unbuildable(make_plan(manifest, named, HOST), named)
