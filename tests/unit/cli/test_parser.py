"""The command line parsed by the named command's parser alone (`parse`), exactly as the
full parser parses it: the same namespace, the same help, the same errors."""

from __future__ import annotations

import argparse

import pytest

from shipyard.cli import _parser
from shipyard.cli._parser import parse, parser

GOOD = [
    ["build", "--target=all", "--output=wheel", "--output=zipapp"],
    ["-f", "build", "build", "-j", "2"],  # a manifest named like a command
    ["-f", "x.yaml", "plan", "--json"],
    ["build", "--out", "wheel", "--version", "1.2"],  # an abbreviated option, a version
    ["check"],
    ["affected", "--since=HEAD"],
    ["schema"],
    ["cache", "info"],
    ["release", "--snapshot", "--version=1.0.0"],
    ["test", "--json"],
    ["keygen", "--out", "k"],
    ["verify", "dist/release/1.0.0", "--key", "k.pub"],
]
BAD = [
    ["build", "--bogus"],
    ["build", "-j", "two"],
    ["-f", "build", "bogus"],  # the command word guessed wrong
    ["bogus"],
    [],
    ["cache"],
    ["keygen", "k.pem"],
    ["--version"],
    ["build", "--help"],
    ["--help"],
]


@pytest.mark.parametrize("argv", GOOD, ids=" ".join)
def test_the_one_command_parse_gives_the_full_parsers_namespace(argv: list[str]) -> None:
    assert parse(argv) == parser().parse_args(argv)


@pytest.mark.parametrize("argv", BAD, ids=lambda a: " ".join(a) or "nothing")
def test_help_versions_and_errors_read_as_the_full_parser_prints_them(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as full:
        parser().parse_args(argv)
    expected = capsys.readouterr()
    with pytest.raises(SystemExit) as one:
        parse(argv)
    assert one.value.code == full.value.code
    assert capsys.readouterr() == expected


def test_a_build_does_not_build_the_other_commands_parsers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def boom(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        raise AssertionError("built another command's parser")

    for command in _parser._ADDERS:
        if command != "build":
            monkeypatch.setitem(_parser._ADDERS, command, boom)
    assert parse(["build", "--target=all"]).target == ["all"]
