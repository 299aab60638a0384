"""The invoke tasks are made from the CLI's parser: every CLI option is reachable from invoke.

Checked three ways: `invoke --help TASK` lists exactly the long options of
`shipyard TASK`; every option given to a task reaches the CLI with its value
(through invoke's own parser); and the usage that worked before (long and
one-letter flags) still means the same command line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from invoke.parser import Parser

from shipyard.cli import parser
from shipyard.cli.tasks import command_line, ns, options

REPO = Path(__file__).resolve().parents[3]
TASKS = ("build", "plan", "push", "release", "promote", "affected", "check", "clean")


def cli_actions(command: str) -> list[argparse.Action]:
    """The options of `shipyard COMMAND`, straight from argparse."""
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    found: argparse.ArgumentParser = sub.choices[command]
    return [a for a in found._actions if not isinstance(a, argparse._HelpAction)]


def invoke_help(task: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "--help", task],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    return done.stdout


def parse_invoke(argv: list[str]) -> tuple[str, dict[str, Any]]:
    """What invoke's parser makes of `invoke ARGV`: the task and its keyword arguments."""
    (call,) = Parser(contexts=ns.to_contexts()).parse_argv(argv)
    assert call.name is not None
    return call.name, call.as_kwargs


def shipyard_argv(argv: list[str]) -> list[str]:
    """The `shipyard` arguments that `invoke ARGV` runs."""
    task, values = parse_invoke(argv)
    return command_line(task, options(task), values)


@pytest.mark.parametrize("task", TASKS)
def test_invoke_help_lists_every_option_of_the_cli_command(task: str) -> None:
    text = invoke_help(task).partition("\nOptions:\n")[2]
    listed = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text))
    wanted = {s for a in cli_actions(task) for s in a.option_strings if s.startswith("--")}
    assert wanted, task
    assert listed == wanted, f"missing {wanted - listed}, extra {listed - wanted}"
    for action in cli_actions(task):  # the CLI's help text, not a copy of it
        assert " ".join((action.help or "").split()[:3]) in " ".join(text.split()), action


@pytest.mark.parametrize("task", TASKS)
def test_every_option_given_to_a_task_reaches_the_cli(task: str) -> None:
    argv, expected = [task], {}
    for action in cli_actions(task):
        flag = next(s for s in action.option_strings if s.startswith("--"))
        if action.nargs == 0:
            argv.append(flag)
            expected[action.dest] = action.const
        elif isinstance(action, argparse._AppendAction):
            argv += [f"{flag}=a-{action.dest}", f"{flag}=b,c"]
            expected[action.dest] = [f"a-{action.dest}", "b,c"]
        else:
            raw = "3" if action.type is int else f"v-{action.dest}"
            argv.append(f"{flag}={raw}")
            expected[action.dest] = action.type(raw) if callable(action.type) else raw
    got = vars(parser().parse_args(shipyard_argv(argv)))
    assert {dest: got[dest] for dest in expected} == expected


@pytest.mark.parametrize(
    ("argv", "cli"),
    [
        ("build --target=standard", "build --target standard"),
        (
            "build -t standard -t agent,echo -j 2 -d -k -s -v 1.0",
            "build --target standard --target agent,echo -j 2 --dry-run --keep-going --json "
            "--version 1.0",
        ),
        (
            "build -o wheel -p linux/arm64 -b x",
            "build --output wheel --platform linux/arm64 --binary x",
        ),
        ("plan -b meshctl -j -f x.yaml", "plan --binary meshctl --json -f x.yaml"),
        ("push -a v1 -t standard", "push --tag v1 --target standard"),
        ("release --version=1.2.3", "release --version 1.2.3"),
        ("release -v 1.2.3 -d", "release --version 1.2.3 --dry-run"),
        ("release --snapshot", "release --snapshot"),
        (
            "release -s -a -c -i http://127.0.0.1:1/",
            "release --snapshot --allow-dirty --clean --index-url http://127.0.0.1:1/",
        ),
        (
            "release --dry-run --jobs=3 --platform=linux/amd64 --output=zipapp",
            "release --dry-run -j 3 --platform linux/amd64 --output zipapp",
        ),
        ("check", "check"),
        ("clean -f b.yaml", "clean -f b.yaml"),
    ],
)
def test_the_usage_of_the_hand_written_tasks_still_works(argv: str, cli: str) -> None:
    """Long flags and the one-letter flags the tasks had before keep their meaning."""
    made = parser().parse_args(shipyard_argv(argv.split()))
    assert made == parser().parse_args(cli.split())


def test_short_flags_keep_the_letters_the_hand_written_tasks_had() -> None:
    letters = {
        "build": "b:binary d:dry_run f:file j:jobs k:keep_going o:output p:platform s:json "
        "t:target v:version",
        "plan": "b:binary f:file j:json o:output p:platform t:target",
        "push": "a:tag b:binary f:file t:target",
        "release": "a:allow_dirty b:binary c:clean d:dry_run f:file i:index_url s:snapshot "
        "t:target v:version",
        "check": "f:file",
        "clean": "f:file",
    }
    for task, pairs in letters.items():
        args = {a.attr_name or a.name: a.nicknames for a in ns[task].get_arguments()}
        for pair in pairs.split():
            letter, name = pair.split(":")
            assert letter in args[name], (task, name, args[name])
        assert not any("h" in nicks for nicks in args.values())  # -h stays invoke's help


def test_invoke_and_the_cli_print_the_same_plan(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "pyproject.toml").write_text("[project]\nname = 'app'\n")
    (tmp_path / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: demo, version: '1.0'}\n"
        "binaries:\n  app: {source: app, entrypoint: 'app:main', outputs: [wheel, zipapp]}\n"
    )
    env = {**os.environ, "NO_COLOR": "1", "SHIPYARD_CACHE_DIR": str(tmp_path / "cache")}
    flags = ["--output=zipapp", "--platform=linux/amd64", "--json"]
    runs = [
        [sys.executable, "-m", "shipyard", "plan", *flags],
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "plan", *flags],
    ]
    plans = []
    for argv in runs:
        done = subprocess.run(
            argv, cwd=tmp_path, capture_output=True, text=True, env=env, check=False
        )
        assert done.returncode == 0, done.stderr
        plans.append(json.loads(done.stdout))
    assert plans[0] == plans[1]
    assert [a["id"] for a in plans[1]["actions"]] == ["wheel:app", "zipapp:app"]
