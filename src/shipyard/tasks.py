"""invoke tasks over the shipyard CLI: `from shipyard.tasks import ns` in a tasks.py.

The tasks are thin on purpose: each turns its flags into a `shipyard` command line
and runs it in-process, so invoke, make and the CLI can never disagree.
"""

from __future__ import annotations

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task

from shipyard.cli import main

__all__ = ["build", "check", "clean", "ns", "plan"]

_SELECTION = {
    "target": "group from binaries.yaml (repeatable, a,b ok; default: all)",
    "binary": "binary by name (repeatable)",
    "output": "wheel, zipapp or image (repeatable)",
    "platform": "os/arch, e.g. linux/arm64 (repeatable)",
    "file": "the manifest (default: binaries.yaml here or above)",
    "json": "print JSON for machines",
}


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


ns = Collection(build, plan, check, clean)
