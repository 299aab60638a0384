"""The CLI reference page is read off the real parser: every command, every flag."""

from __future__ import annotations

from shipyard._docs import cli


def test_every_command_has_a_section_with_its_flags() -> None:
    text = cli.page()
    commands = cli.commands()
    assert {"build", "release", "test", "verify", "schema"} <= set(commands)
    for name in commands:
        assert f"\n### {name}\n" in text
    assert "| `--keep-going` | — | after a failure, finish what does not depend on it |" in text
    assert "`--signing-key` | `PATH` |" in text


def test_flags_carry_their_values_choices_and_defaults() -> None:
    found = {(f.command, f.spelling): f for f in cli.flags()}
    assert found[("build", "-j, --jobs")].value == "JOBS"
    assert found[("cache", "action")].value == "{prune,info}"
    assert found[("", "-f, --file")].help.startswith("the manifest")
    assert found[("build", "--dry-run")].value == ""


def test_the_usage_lines_do_not_depend_on_the_terminal(monkeypatch: object) -> None:
    import os

    before = cli.page()
    os.environ["COLUMNS"] = "40"
    try:
        assert cli.page() == before
    finally:
        del os.environ["COLUMNS"]
