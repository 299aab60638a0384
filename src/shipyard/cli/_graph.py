"""`shipyard graph`: the repository's projects, libraries, binaries and outputs as a
self-contained HTML page, Mermaid, DOT or JSON (`shipyard.engine.graph`), on stdout or
in a file. Only argparse is imported until the command runs."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_parser", "graph_command"]

_FORMATS = ("html", "mermaid", "dot", "json")  # as shipyard.engine.graph.FORMATS


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Register `graph` on the CLI's subcommands."""
    graph = sub.add_parser(
        "graph",
        parents=[common],
        help="draw the projects, libraries, binaries and outputs (HTML, Mermaid, DOT, JSON)",
        description=(
            "The repository's projects, in-repo libraries, binaries and their outputs, and "
            "the edges between them: a self-contained HTML page (no network), Mermaid, "
            "Graphviz DOT or JSON. With --since, what changed and what it affects is marked, "
            "with the reasons."
        ),
    )
    graph.add_argument(
        "--format",
        choices=_FORMATS,
        help="default: from -o's suffix (.html, .mmd, .dot, .json), else mermaid",
    )
    graph.add_argument(
        "-o", "--out", type=Path, metavar="FILE", help="write here (default: stdout)"
    )
    for flag, meta, text in (
        ("--target", "GROUP", "only a group's binaries and what they need"),
        ("--binary", "NAME", "only this binary and what it needs"),
    ):
        graph.add_argument(flag, action="append", metavar=meta, help=text + "; repeatable, a,b ok")
    graph.add_argument(
        "--since", metavar="REF", help="mark what changed since the git REF and what it affects"
    )


def graph_command(args: argparse.Namespace) -> int:
    """Build the graph of the selection and write it in the format asked for."""
    import os
    import sys

    from shipyard._fs import atomic_write
    from shipyard.cli._args import cache_dir, manifest_of
    from shipyard.engine.graph import build_graph, format_for, render
    from shipyard.engine.plan import Selection, split_flag
    from shipyard.engine.planning import load_projects
    from shipyard.errors import UsageError

    fmt = format_for(args.format, args.out)
    manifest = manifest_of(args, cached=True)
    workspace = load_projects(manifest, cache_dir=cache_dir(args))
    selection = Selection(targets=split_flag(args.target), binaries=split_flag(args.binary))
    graph = build_graph(manifest, workspace, selection, since=args.since, env=os.environ)
    text = render(graph, fmt)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(args.out, text.encode(), durable=False)
    except OSError as exc:
        raise UsageError(
            f"-o {args.out}: cannot write it ({exc.strerror}); pass a writable path"
        ) from None
    marked = sum(1 for n in graph.nodes if n.state)
    since = f", {marked} marked since {args.since}" if args.since else ""
    print(
        f"wrote {args.out}: {len(graph.nodes)} nodes, {len(graph.edges)} edges{since}",
        file=sys.stderr,
    )
    return 0
