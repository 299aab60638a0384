"""The `shipyard` argument parser: one small function per command or group of commands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from shipyard import __version__

__all__ = ["CACHE_MODE_HELP", "parse", "parser"]

CACHE_MODE_HELP = (
    "read-write (default), read-only (never write: pull requests) or write-only "
    "(never read: a warming job); default $SHIPYARD_CACHE_MODE"
)

_CACHE_DIR = "action cache (default: $SHIPYARD_CACHE_DIR, XDG)"
_FORCE_PROTECTED = "push to image.protected hubs outside CI (default: only when CI is set)"


def _common(default: object = argparse.SUPPRESS) -> argparse.ArgumentParser:
    # Subcommands default to SUPPRESS so `shipyard -f X check` keeps the top-level -f.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-f",
        "--file",
        type=Path,
        default=default,
        help="the manifest (default: binaries.yaml here or above)",
    )
    return common


def _selection() -> argparse.ArgumentParser:
    sel = argparse.ArgumentParser(add_help=False)
    for flag, meta, text in (
        ("--target", "GROUP", "a group from binaries.yaml (default: all)"),
        ("--binary", "NAME", "a binary by name"),
        ("--output", "KIND", "wheel, zipapp or image"),
        ("--platform", "OS/ARCH", "e.g. linux/arm64"),
    ):
        sel.add_argument(flag, action="append", metavar=meta, help=text + "; repeatable, a,b ok")
    sel.add_argument(
        "--since",
        metavar="REF",
        help="only the binaries whose inputs changed since the git REF (see `affected`)",
    )
    sel.add_argument("--json", action="store_true", help="print JSON for machines")
    sel.add_argument(
        "--version",
        dest="release_version",
        metavar="X",
        help="the version to stamp (default: $VERSION, then project.version)",
    )
    return sel


def _remote(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--cache",
        dest="remote",
        metavar="URL",
        help="also share a remote cache: oci://, http[s]:// or grpc[s]://",
    )
    command.add_argument("--cache-mode", metavar="MODE", help=CACHE_MODE_HELP)


def _add_build(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    build = sub.add_parser("build", parents=[_common(), _selection()], help="build outputs")
    build.add_argument("-j", "--jobs", type=int, default=None, help="parallel actions (CPUs)")
    build.add_argument("--dry-run", action="store_true", help="print the plan, build nothing")
    build.add_argument(
        "--keep-going",
        action="store_true",
        help="after a failure, finish what does not depend on it",
    )
    build.add_argument("--cache-dir", help=_CACHE_DIR)
    build.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    build.add_argument("--force", action="store_true", help="ignore cache hits; rebuild all")
    _remote(build)
    build.add_argument("--shard", metavar="I/N", help="build only slice I of N of the actions")


def _add_cache(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cache = sub.add_parser("cache", help="show or prune every part of the cache")
    cache.add_argument(
        "action", choices=["prune", "info"], help="info: what each part holds; prune: shrink it"
    )
    cache.add_argument("--cache-dir", help=_CACHE_DIR)
    cache.add_argument(
        "--max-size",
        help="prune down to this size (bytes, or K/M/G/T; default $SHIPYARD_CACHE_MAX_SIZE, 512M)",
    )


def _add_push(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    push = sub.add_parser(
        "push", parents=[_common(), _selection()], help="push built images to every hub"
    )
    push.add_argument("--tag", action="append", help="tags to push (default: image.tags)")
    push.add_argument(
        "--allow-partial",
        action="store_true",
        help="push an image that lacks some of the binary's declared platforms",
    )
    push.add_argument("--force-protected", action="store_true", help=_FORCE_PROTECTED)


def _add_release(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    release = sub.add_parser(
        "release",
        parents=[_common(), _selection()],
        help="preflight, build, validate, stage, publish, verify",
    )
    release.add_argument("-j", "--jobs", type=int, default=None, help="parallel build actions")
    release.add_argument("--snapshot", action="store_true", help="build and stage; publish nothing")
    release.add_argument("--dry-run", action="store_true", help="print every publish step only")
    release.add_argument("--allow-dirty", action="store_true", help="release a modified tree")
    release.add_argument("--clean", action="store_true", help="replace dist/release/<version>")
    release.add_argument("--index-url", help="package index upload URL ($SHIPYARD_INDEX_URL)")
    release.add_argument("--cache-dir", help=_CACHE_DIR)
    _remote(release)
    release.add_argument("--force-protected", action="store_true", help=_FORCE_PROTECTED)
    release.add_argument(
        "--clobber",
        action="store_true",
        help="move existing tags that are not image.movable_tags (default: refuse)",
    )
    release.add_argument(
        "--signing-key",
        metavar="PATH",
        help="PEM ECDSA P-256 key to sign the release with (default: $SHIPYARD_SIGNING_KEY)",
    )


def _add_repository(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The commands about the repository rather than a build: affected, init, schema, clean."""
    sub.add_parser(
        "affected",
        parents=[_common(), _selection()],
        help="list the binaries whose inputs changed since --since=REF, and why",
    )
    sub.add_parser(
        "init", parents=[_common()], help="write a first binaries.yaml from the projects here"
    )
    sub.add_parser("schema", help="print the manifest's JSON Schema")
    sub.add_parser("clean", parents=[_common()], help="remove dist/")


_Sub = argparse._SubParsersAction  # the `add_parser` of the top parser's COMMAND


def _check(sub: _Sub[argparse.ArgumentParser]) -> None:
    sub.add_parser("check", parents=[_common()], help="validate the manifest")


def _plan(sub: _Sub[argparse.ArgumentParser]) -> None:
    sub.add_parser("plan", parents=[_common(), _selection()], help="print the action graph")


def _add_load(sub: _Sub[argparse.ArgumentParser]) -> None:
    from shipyard.cli import _load  # its own module: argparse only until run

    _load.add_parser(sub, _common())


def _add_test(sub: _Sub[argparse.ArgumentParser]) -> None:
    from shipyard.cli import _test  # its own module: argparse only until run

    _test.add_parser(sub, _common())


def _add_promote(sub: _Sub[argparse.ArgumentParser]) -> None:
    from shipyard.cli import _promote

    _promote.add_parser(sub, _common())


def _add_graph(sub: _Sub[argparse.ArgumentParser]) -> None:
    from shipyard.cli import _graph  # its own module: argparse only until run

    _graph.add_parser(sub, _common())


def _add_sign(sub: _Sub[argparse.ArgumentParser]) -> None:
    from shipyard.cli import _sign

    _sign.add_parsers(sub, _common())


# Each command and the function that adds it (some add a few), in the order `--help`
# lists them.
_ADDERS: dict[str, Callable[[_Sub[argparse.ArgumentParser]], None]] = {
    "check": _check,
    "plan": _plan,
    "build": _add_build,
    "cache": _add_cache,
    "push": _add_push,
    "release": _add_release,
    "affected": _add_repository,
    "graph": _add_graph,
    "init": _add_repository,
    "schema": _add_repository,
    "clean": _add_repository,
    "load": _add_load,
    "test": _add_test,
    "promote": _add_promote,
    "keygen": _add_sign,
    "verify": _add_sign,
}


class _Retry(Exception):
    """A parser of one command met an error: the full parser parses again and says it."""


class _OneCommand(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Retry(message)


def parser(
    only: str | None = None, cls: type[argparse.ArgumentParser] = argparse.ArgumentParser
) -> argparse.ArgumentParser:
    """The argument parser of every subcommand; with `only`, of that command alone
    (and any its function adds beside it)."""
    top = cls(
        prog="shipyard",
        description="Wheels, zipapps and images from binaries.yaml.",
        parents=[_common(None)],
    )
    # `--version` here prints shipyard's version (as invoke, nox, docker and uv do);
    # after a command it is the version to stamp. `--tool-version` stays as an alias.
    top.add_argument(
        "--version", "--tool-version", action="version", version=f"shipyard {__version__}"
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    adders = [_ADDERS[only]] if only in _ADDERS else list(_ADDERS.values())
    for add in dict.fromkeys(adders):  # each once, in order
        add(sub)
    return top


def _command_word(argv: Sequence[str]) -> str | None:
    """The word of `argv` that names the command: the first one not an option or -f's value."""
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in ("-f", "--file"):
            skip = True
        elif not word.startswith("-"):
            return word
    return None


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """`argv` (default: sys.argv[1:]) parsed as `parser()` parses it.

    Every start parses its command line, and building all fifteen commands' parsers
    costs more than the rest of the parse: the parser of the command named alone
    parses first; anything it cannot parse is parsed again, and reported, by the full
    parser, so errors and help read the same.
    """
    words = list(sys.argv[1:] if argv is None else argv)
    command = _command_word(words)
    if command in _ADDERS:
        try:
            args = parser(command, _OneCommand).parse_args(words)
        except _Retry:
            pass
        else:
            if args.command == command:
                return args
    return parser().parse_args(words)
