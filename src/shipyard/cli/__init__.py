"""The `shipyard` command: the parser, a table from command to handler, and the one
error handler that turns the library's typed errors into messages and exit codes.

The handlers (`_build`, `_cache`, `_graph`, `_release`, `_repository`, `_test`,
`_promote`, `_sign`) are the only modules besides `_console` that print.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Mapping, Sequence

from shipyard.cli import _promote, _sign, _test
from shipyard.cli._args import manifest_of
from shipyard.cli._build import affected_command, build_command, plan_command
from shipyard.cli._cache import cache_command
from shipyard.cli._graph import graph_command
from shipyard.cli._load import load_command
from shipyard.cli._parser import parse, parser
from shipyard.cli._release import push_command, release_command
from shipyard.cli._repository import check_command, clean_command, init_command, schema_command
from shipyard.errors import ShipyardError

# Each command imports what it needs when it runs: `check`, `plan`, `schema` and
# `--version` never load the builders, oci, the HTTP clients or the release stages
# (tests/unit/test_cli_imports.py), so they start fast and work in the zipapp.

__all__ = ["main", "parser", "run"]


def _test_command(args: argparse.Namespace) -> int:
    return _test.run(args, manifest_of(args, cached=True))


def _promote_command(args: argparse.Namespace) -> int:
    return _promote.run(args, manifest_of(args))


_COMMANDS: Mapping[str, Callable[[argparse.Namespace], int]] = {
    "check": check_command,
    "plan": plan_command,
    "build": build_command,
    "cache": cache_command,
    "push": push_command,
    "load": load_command,
    "release": release_command,
    "affected": affected_command,
    "graph": graph_command,
    "init": init_command,
    "schema": schema_command,
    "clean": clean_command,
    "test": _test_command,
    "promote": _promote_command,
    "keygen": _sign.run_keygen,
    "verify": _sign.run_verify,
}


class _StderrHandler(logging.Handler):
    """Writes the library's warnings (retries and their reasons) to the current stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"shipyard: {record.getMessage()}", file=sys.stderr)


def _log_to_stderr() -> None:
    """The library logs (never prints); the CLI shows warnings such as retries."""
    logger = logging.getLogger("shipyard")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler(logging.WARNING))
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code (0 ok, 1 a step failed, 2 bad input)."""
    args = parse(argv)
    _log_to_stderr()
    try:
        return _COMMANDS[args.command](args)
    except ShipyardError as exc:
        print(f"shipyard: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("shipyard: interrupted", file=sys.stderr)
        return 130


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
