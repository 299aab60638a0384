"""`shipyard graph`: the format from the flags, the file written, and bad flags (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shipyard.cli import main
from tests.unit.engine.graph.conftest import acme, template

__all__ = ["acme", "template"]  # the fixtures, imported for their names


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIPYARD_CACHE_DIR", str(tmp_path / "cache"))


def test_stdout_is_mermaid(template: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-f", str(template / "binaries.yaml"), "graph"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("flowchart LR\n") and "binary_cli -.-> image_cli" in out


def test_o_html_writes_the_page_and_says_so(
    acme: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (acme / "libs/model/acme_model/__init__.py").write_text("X = 2\n")
    out = tmp_path / "new" / "graph.html"
    manifest = str(acme / "binaries.yaml")
    assert main(["-f", manifest, "graph", "--since=HEAD", "-o", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    err = capsys.readouterr().err
    assert err == f"wrote {out}: 17 nodes, 16 edges, 12 marked since HEAD\n"


def test_binary_and_format_json(template: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = str(template / "binaries.yaml")
    assert main(["-f", manifest, "graph", "--binary", "agent", "--format=json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [n["id"] for n in data["nodes"] if n["kind"] == "binary"] == ["binary:agent"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-o", "graph.txt"], "-o graph.txt: cannot tell the format from the name; pass --format="),
        (["--binary", "nope"], "--binary=nope: unknown value; choose from: agent, cli"),
        (["--target", "nope"], "--target=nope: unknown value; choose from: all, apps"),
        (["--since", "no-such-ref"], "no-such-ref"),
    ],
)
def test_bad_flags_are_exit_2_naming_the_flag(
    template: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["-f", str(template / "binaries.yaml"), "graph", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("shipyard: error: ") and message in err, err


def test_an_unknown_format_is_exit_2_with_the_choices(
    template: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["-f", str(template / "binaries.yaml"), "graph", "--format=svg"])
    assert exc.value.code == 2
    assert "argument --format: invalid choice: 'svg' (choose from" in capsys.readouterr().err


def test_an_unwritable_out_is_exit_2(
    template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "graph.html"  # a folder that is a file
    assert main(["-f", str(template / "binaries.yaml"), "graph", "-o", str(out)]) == 2
    assert f"-o {out}: cannot write it" in capsys.readouterr().err
