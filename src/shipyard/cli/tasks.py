"""invoke tasks over the shipyard CLI: `from shipyard.cli.tasks import ns` in a tasks.py.

The tasks are thin on purpose: each turns its flags into a `shipyard` command line
and runs it in-process, so invoke, make and the CLI can never disagree.
"""

from __future__ import annotations

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task

from shipyard.cli import main

__all__ = ["build", "check", "clean", "ns", "plan", "push", "release"]

_SELECTION = {
    "target": "group from binaries.yaml (repeatable, a,b ok; default: all)",
    "binary": "binary by name (repeatable)",
    "output": "wheel, zipapp or image (repeatable)",
    "platform": "os/arch, e.g. linux/arm64 (repeatable)",
    "file": "the manifest (default: binaries.yaml here or above)",
    "json": "print JSON for machines",
}


def _pick(*names: str) -> dict[str, str]:
    return {name: _SELECTION[name] for name in names}


def _run(argv: list[str]) -> None:
    code = main(argv)
    if code:
        raise Exit(code=code)


def _selection_args(
    target: list[str], binary: list[str], output: list[str], platform: list[str]
) -> list[str]:
    args: list[str] = []
    for flag, values in (
        ("--target", target),
        ("--binary", binary),
        ("--output", output),
        ("--platform", platform),
    ):
        args += [f"{flag}={v}" for v in values]
    return args


def _file_args(file: str) -> list[str]:
    return ["-f", file] if file else []


@task(
    iterable=["target", "binary", "output", "platform"],
    help={
        **_SELECTION,
        "jobs": "parallel actions (default: CPUs)",
        "dry_run": "print the plan, build nothing",
        "keep_going": "after a failure, finish what does not depend on it",
    },
)
def build(
    c: Context,
    target: list[str] | None = None,
    binary: list[str] | None = None,
    output: list[str] | None = None,
    platform: list[str] | None = None,
    jobs: int = 0,
    dry_run: bool = False,
    keep_going: bool = False,
    json: bool = False,
    version: str = "",
    file: str = "",
) -> None:
    """Build wheels, zipapps and images for a selection (default: every binary)."""
    args = [
        "build",
        *_file_args(file),
        *_selection_args(target or [], binary or [], output or [], platform or []),
    ]
    args += [f"--jobs={jobs}"] if jobs else []
    args += ["--dry-run"] if dry_run else []
    args += ["--keep-going"] if keep_going else []
    args += ["--json"] if json else []
    args += [f"--version={version}"] if version else []
    _run(args)


@task(iterable=["target", "binary", "output", "platform"], help=_SELECTION)
def plan(
    c: Context,
    target: list[str] | None = None,
    binary: list[str] | None = None,
    output: list[str] | None = None,
    platform: list[str] | None = None,
    json: bool = False,
    file: str = "",
) -> None:
    """Print the action graph of a selection without building."""
    args = [
        "plan",
        *_file_args(file),
        *_selection_args(target or [], binary or [], output or [], platform or []),
    ]
    _run([*args, "--json"] if json else args)


@task(help={"file": _SELECTION["file"]})
def check(c: Context, file: str = "") -> None:
    """Validate binaries.yaml."""
    _run(["check", *_file_args(file)])


@task(help={"file": _SELECTION["file"]})
def clean(c: Context, file: str = "") -> None:
    """Remove dist/."""
    _run(["clean", *_file_args(file)])


@task(
    iterable=["target", "binary", "tag"],
    help={**_pick("target", "binary", "file"), "tag": "tags (default: image.tags)"},
)
def push(
    c: Context,
    target: list[str] | None = None,
    binary: list[str] | None = None,
    tag: list[str] | None = None,
    file: str = "",
) -> None:
    """Push built images to every hub of their binaries."""
    args = ["push", *_file_args(file), *_selection_args(target or [], binary or [], [], [])]
    _run(args + [f"--tag={t}" for t in tag or []])


@task(
    iterable=["target", "binary"],
    help={
        **_pick("target", "binary", "file"),
        "version": "PEP 440 version to release (default: $VERSION, then git describe)",
        "snapshot": "build and stage a dev version; publish nothing",
        "dry_run": "print every publish step; publish nothing",
        "allow_dirty": "release a tree with uncommitted changes",
        "clean": "replace an existing dist/release/<version>",
        "index_url": "package index upload URL (default: $SHIPYARD_INDEX_URL)",
    },
)
def release(
    c: Context,
    version: str = "",
    target: list[str] | None = None,
    binary: list[str] | None = None,
    snapshot: bool = False,
    dry_run: bool = False,
    allow_dirty: bool = False,
    clean: bool = False,
    index_url: str = "",
    file: str = "",
) -> None:
    """Preflight, build, validate, stage, publish and verify a release."""
    args = ["release", *_file_args(file), *_selection_args(target or [], binary or [], [], [])]
    args += [f"--version={version}"] if version else []
    for flag, on in (
        ("--snapshot", snapshot),
        ("--dry-run", dry_run),
        ("--allow-dirty", allow_dirty),
        ("--clean", clean),
    ):
        args += [flag] if on else []
    args += [f"--index-url={index_url}"] if index_url else []
    _run(args)


ns = Collection(build, plan, check, clean, push, release)
