"""invoke tasks over the shipyard CLI: `from shipyard.cli.tasks import ns` in a tasks.py.

The tasks are thin on purpose: each is made from its command's argparse parser
(`shipyard.cli.parser`), so every option of the CLI is an option of the task with
the same long name and help, and a new CLI option needs no edit here. A task turns
its flags back into a `shipyard` command line and runs it in-process, so invoke,
make and the CLI can never disagree, and the CLI validates every value.
"""

from __future__ import annotations

import argparse
import inspect
import keyword
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import Task

from shipyard.cli import main, parser

__all__ = [
    "CommandTask",
    "Option",
    "affected",
    "build",
    "check",
    "clean",
    "command_line",
    "ns",
    "options",
    "plan",
    "promote",
    "push",
    "release",
    "test",
]

# The one line invoke shows for each task in `invoke --list`.
_SUMMARY = {
    "build": "Build wheels, zipapps and images for a selection (default: every binary).",
    "plan": "Print the action graph of a selection without building.",
    "check": "Validate binaries.yaml.",
    "clean": "Remove dist/.",
    "push": "Push built images to every hub of their binaries.",
    "release": "Preflight, build, validate, stage, publish and verify a release.",
    "promote": "Copy a staged release by digest from its staging hub to the final hubs.",
    "affected": "List the binaries whose inputs changed since a git reference.",
    "test": "Run the projects' test stages (lint, typecheck, unit, integration), cached.",
}
# invoke's one-letter flags: the CLI's own (-f, -j) first, then these, in this order,
# each the first letter still free in its task (the letters the hand-written tasks
# had). Options without one have only their long form; -h stays invoke's help.
_LETTERS: Mapping[str, str] = {
    "target": "t",
    "binary": "b",
    "output": "o",
    "platform": "p",
    "dry_run": "d",
    "keep_going": "k",
    "version": "v",
    "snapshot": "s",
    "allow_dirty": "a",
    "clean": "c",
    "index_url": "i",
    "tag": "a",
    "json": "js",
}


@dataclass(frozen=True)
class Option:
    """One option of a shipyard command, as its task takes it."""

    # The task's parameter: the long flag without dashes, `-` as `_`, and a Python
    # keyword with `_` after it (`--from` is `from_`, which invoke spells --from).
    name: str
    flag: str  # the CLI's long flag, e.g. --dry-run
    kind: Literal["flag", "list", "value"]  # on/off, repeatable, one value
    help: str
    short: str = ""  # the CLI's one-letter flag, e.g. j for -j


@cache
def _command_parser(command: str) -> argparse.ArgumentParser:
    for action in parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[command]
            return found
    raise KeyError(command)


def options(command: str) -> tuple[Option, ...]:
    """The options of `shipyard COMMAND`, read from the CLI's parser."""
    found: list[Option] = []
    for action in _command_parser(command)._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if not action.option_strings and action.nargs == "*":
            continue  # `shipyard test -- ARGS`: the stage commands' own, not the task's
        longs = [s for s in action.option_strings if s.startswith("--")]
        if not longs:
            raise ValueError(f"shipyard {command}: {action.dest} has no --flag for invoke")
        shorts = [s[1:] for s in action.option_strings if len(s) == 2]
        kind: Literal["flag", "list", "value"] = (
            "flag"
            if action.nargs == 0
            else "list"
            if isinstance(action, argparse._AppendAction)
            else "value"
        )
        name = longs[0][2:].replace("-", "_")
        found.append(
            Option(
                name=f"{name}_" if keyword.iskeyword(name) else name,
                flag=longs[0],
                kind=kind,
                help=action.help or "",
                short=shorts[0] if shorts else "",
            )
        )
    return tuple(found)


def command_line(command: str, opts: Sequence[Option], values: Mapping[str, Any]) -> list[str]:
    """The `shipyard` arguments for a task called with `values` (unset ones left out)."""
    argv = [command]
    for opt in opts:
        value = values.get(opt.name)
        if opt.kind == "flag":
            argv += [opt.flag] if value else []
        elif opt.kind == "list":
            argv += [f"{opt.flag}={item}" for item in value or ()]
        elif value is not None and value != "":
            argv.append(f"{opt.flag}={value}")
    return argv


def _run(argv: list[str]) -> None:
    code = main(argv)
    if code:
        raise Exit(code=code)


def _letters(opts: Sequence[Option]) -> dict[str, str]:
    taken = {"h"}  # `invoke TASK -h` is invoke's help
    letters: dict[str, str] = {}
    wanted = [(o.name, o.short) for o in opts if o.short]
    names = {o.name for o in opts}
    wanted += [(name, chars) for name, chars in _LETTERS.items() if name in names]
    for name, chars in wanted:
        free = next((c for c in chars if c not in taken), "")
        if free and name not in letters:
            letters[name] = free
            taken.add(free)
    return letters


class CommandTask(Task[Any]):
    """An invoke task whose options are those of one `shipyard` command."""

    def __init__(self, command: str) -> None:
        opts = options(command)
        self._letters = _letters(opts)

        def body(c: Context, **values: Any) -> None:
            _run(command_line(command, opts, values))

        context = inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        params = [
            inspect.Parameter(
                o.name, inspect.Parameter.KEYWORD_ONLY, default=False if o.kind == "flag" else None
            )
            for o in opts
        ]
        body.__signature__ = inspect.Signature([context, *params])  # type: ignore[attr-defined]
        body.__name__ = body.__qualname__ = command
        body.__doc__ = _SUMMARY.get(command, "")
        super().__init__(
            body,
            name=command,
            positional=[],
            iterable=[o.name for o in opts if o.kind == "list"],
            help={o.name: o.help for o in opts},
            auto_shortflags=False,
        )

    def arg_opts(self, name: str, default: str, taken_names: set[str]) -> dict[str, Any]:
        """invoke's options for one parameter, with its one-letter flag.

        Values stay strings (`-j STRING`): the CLI parses them, so a bad one is
        its usual exit 2 naming the flag, never a traceback from invoke's cast.
        """
        opts = super().arg_opts(name, default, taken_names)
        if name in self._letters:
            opts["names"] = [*opts["names"], self._letters[name]]
        return opts


build = CommandTask("build")
plan = CommandTask("plan")
check = CommandTask("check")
clean = CommandTask("clean")
push = CommandTask("push")
release = CommandTask("release")
affected = CommandTask("affected")
promote = CommandTask("promote")
test = CommandTask("test")

ns = Collection(build, plan, check, clean, push, release, affected, promote, test)
