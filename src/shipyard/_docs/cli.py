"""The CLI reference page, read off the real argument parser (`shipyard.cli._parser`)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass

from shipyard._docs._markdown import code, table
from shipyard.cli._parser import parser

__all__ = ["Flag", "commands", "flags", "page", "parser", "undocumented"]


@dataclass(frozen=True)
class Flag:
    """One argument of one command: how it is written, what it takes, its help."""

    command: str  # "" for the top-level options
    spelling: str  # "-j, --jobs" or the positional's name
    value: str  # the metavar or choices, "" for a switch
    help: str
    default: str


def _subparsers(
    top: argparse.ArgumentParser,
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    raise LookupError("the shipyard parser has no subcommands")


def commands(
    top: argparse.ArgumentParser | None = None,
) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """Each command's name -> (its one-line help, its parser), in `--help`'s order."""
    top = top or parser()
    sub = _subparsers(top)
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    return {name: (helps.get(name, ""), p) for name, p in sub.choices.items()}


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices:
        return "{" + ",".join(str(c) for c in action.choices) + "}"
    if action.metavar:
        return str(action.metavar)
    return action.dest.upper()


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS, False, []):
        return ""
    return str(action.default)


def _flags_of(command: str, p: argparse.ArgumentParser) -> Iterator[Flag]:
    for action in p._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        spelling = ", ".join(action.option_strings) or action.dest
        help_text = "" if action.help in (None, argparse.SUPPRESS) else str(action.help)
        if isinstance(action, argparse._VersionAction):
            help_text = (
                help_text
                if action.help != "show program's version number and exit"
                else ("print shipyard's version and exit")
            )
        yield Flag(command, spelling, _value(action), help_text, _default(action))


def flags(top: argparse.ArgumentParser | None = None) -> list[Flag]:
    """Every argument of every command, the top-level options first."""
    top = top or parser()
    found = list(_flags_of("", top))
    for name, (_, p) in commands(top).items():
        found += _flags_of(name, p)
    return found


def undocumented(top: argparse.ArgumentParser | None = None) -> list[str]:
    """`COMMAND FLAG` of every argument without help text (the top-level ones as `FLAG`)."""
    return [f"{f.command} {f.spelling}".strip() for f in flags(top) if not f.help.strip()]


def _usage(p: argparse.ArgumentParser) -> str:
    # A fixed width, not the terminal's: the page is the same wherever it is made.
    formatter = argparse.HelpFormatter(p.prog, width=88)
    formatter.add_usage(p.usage, p._actions, p._mutually_exclusive_groups)
    return formatter.format_help().strip()


def page() -> str:
    """docs/reference/cli.md."""
    top = parser()
    out = [
        "# Command line\n",
        "Generated from shipyard's own argument parser (`shipyard.cli._parser`), so every "
        "command and flag here is one `shipyard` accepts. Run `shipyard COMMAND --help` "
        "for the same text in a terminal.\n",
        "```text\nshipyard [-f FILE] [--version] COMMAND ...\n```\n",
        f"{top.description}\n",
        "## Options of every command\n",
        table(
            ("option", "value", "meaning"),
            ((code(f.spelling), f.value and code(f.value), f.help) for f in _flags_of("", top)),
        ),
        "## Commands\n",
        table(
            ("command", "what it does"),
            ((f"[{code(n)}](#{n})", h) for n, (h, _) in commands(top).items()),
        ),
    ]
    for name, (help_text, p) in commands(top).items():
        rows = [
            (code(f.spelling), f.value and code(f.value), f.help, f.default and code(f.default))
            for f in _flags_of(name, p)
        ]
        out.append(f"### {name}\n")
        out.append(f"{help_text[:1].upper() + help_text[1:]}.\n" if help_text else "")
        out.append(f"```text\n{_usage(p)}\n```\n")
        out.append(
            table(("argument", "value", "meaning", "default"), rows) if rows else "No arguments.\n"
        )
    return "\n".join(out)
