"""`shipyard check`, `schema`, `init` and `clean`: the manifest and the repository's dist/."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from shipyard.cli._args import manifest_of
from shipyard.errors import UsageError

__all__ = ["check_command", "clean_command", "init_command", "schema_command"]


def check_command(args: argparse.Namespace) -> int:
    """`shipyard check`: the manifest, its entry points, the projects and uv.lock."""
    from shipyard.engine.planning import read_workspace
    from shipyard.entrypoints import check_own_entrypoints

    manifest = manifest_of(args)
    check_own_entrypoints(manifest)
    workspace = read_workspace(manifest)
    groups = ", ".join(sorted(manifest.groups))
    lock = "; " + "; ".join(workspace.lock_status) if workspace.lock_status else ""
    print(
        f"{manifest.path}: ok, {len(manifest.binaries)} binaries, "
        f"{len(workspace.projects)} projects{lock}; groups: {groups}"
    )
    return 0


def schema_command(args: argparse.Namespace) -> int:
    """`shipyard schema`: the manifest's JSON Schema."""
    from shipyard.manifest import json_schema

    print(json.dumps(json_schema(), indent=2))
    return 0


def init_command(args: argparse.Namespace) -> int:
    """`shipyard init`: a first binaries.yaml from the projects here; never overwrites."""
    from shipyard._fs import atomic_write
    from shipyard.init import first_manifest
    from shipyard.workspace import load_workspace

    path = Path(args.file) if getattr(args, "file", None) else Path.cwd() / "binaries.yaml"
    if path.exists():
        raise UsageError(f"{path}: already exists; init never overwrites: remove it first")
    workspace = load_workspace(path.parent.resolve())
    made = first_manifest(workspace, path.parent)
    atomic_write(path, made.text.encode())
    print(f"wrote {path}: {made.binaries} binaries from {made.projects} projects")
    for note in made.skipped:
        print(f"  not listed: {note}")
    return 0


def clean_command(args: argparse.Namespace) -> int:
    """`shipyard clean`: remove dist/."""
    shutil.rmtree(manifest_of(args).root / "dist", ignore_errors=True)
    return 0
