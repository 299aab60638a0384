"""shipyard.nox: which session arguments are shipyard test's options."""

from __future__ import annotations

import pytest

from shipyard.nox import split_posargs


@pytest.mark.parametrize(
    ("posargs", "options", "rest"),
    [
        (["-k", "name"], [], ["-k", "name"]),
        (["--since", "origin/main", "-j", "4"], ["--since", "origin/main", "-j", "4"], []),
        (["--since=HEAD~1", "-j2", "--dry-run", "-x"],
         ["--since=HEAD~1", "-j2", "--dry-run"], ["-x"]),
        (["--project", "api", "--", "--since"], ["--project", "api"], ["--since"]),
    ],
)  # fmt: skip
def test_options_first_then_the_stage_commands_arguments(
    posargs: list[str], options: list[str], rest: list[str]
) -> None:
    assert split_posargs(posargs) == (options, rest)
