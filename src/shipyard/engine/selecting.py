"""What a selection picks from the manifest, and why it may leave nothing to build.

Something named explicitly that cannot be built is a UsageError (exit 2), as Bazel
and Cargo refuse an explicitly named target they cannot build; groups that leave
nothing are an outcome with a note (`unbuildable`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from shipyard.errors import UsageError
from shipyard.manifest import OUTPUT_KINDS, PLATFORMS, Binary, Manifest, did_you_mean

if TYPE_CHECKING:
    from shipyard.engine.plan import Plan, Selection

__all__ = ["nothing_left", "selected_binaries", "unbuildable"]


def _check_choices(flag: str, values: Sequence[str], choices: Iterable[str]) -> None:
    known = tuple(choices)
    for value in values:
        if value not in known:
            hint = did_you_mean(value, known) or "choose from: " + ", ".join(known)
            raise UsageError(f"{flag}={value}: unknown value; {hint}")


def selected_binaries(manifest: Manifest, selection: Selection) -> tuple[Binary, ...]:
    """The binaries `selection` names (its groups', then those named; all by default),
    each once; UsageError (exit 2) for a name, kind or platform that is unknown."""
    _check_choices("--target", selection.targets, sorted(manifest.groups))
    _check_choices("--binary", selection.binaries, sorted(manifest.binaries))
    _check_choices("--output", selection.outputs, OUTPUT_KINDS)
    _check_choices("--platform", selection.platforms, PLATFORMS)
    names: list[str] = []
    if not selection.targets and not selection.binaries:
        names.extend(manifest.groups["all"])
    for target in selection.targets:
        names.extend(manifest.groups[target])
    names.extend(selection.binaries)
    return tuple(manifest.binaries[n] for n in dict.fromkeys(names))


def nothing_left(
    binary: Binary, outputs: Sequence[str], platforms: Sequence[str], selection: Selection
) -> str:
    """Why `--output`/`--platform` leave `binary` nothing to build, or '' if they do not."""
    if not outputs:
        return (
            f"no output left: it builds {', '.join(binary.outputs)}; "
            f"--output asked for {', '.join(selection.outputs)}"
        )
    if "wheel" not in outputs and not platforms:  # a wheel is for every platform
        return (
            f"no platform left for its {' and '.join(outputs)}: it builds for "
            f"{', '.join(binary.platforms)}; --platform asked for {', '.join(selection.platforms)}"
        )
    return ""


def _flags(selection: Selection) -> str:
    flags = [
        f"--{flag}={','.join(values)}"
        for flag, values in (
            ("target", selection.targets),
            ("binary", selection.binaries),
            ("output", selection.outputs),
            ("platform", selection.platforms),
        )
        if values
    ]
    return " ".join(flags) or "all binaries"


def unbuildable(plan: Plan, selection: Selection) -> str:
    """What of `selection` the plan cannot build, said before anything is built.

    Something named explicitly that cannot be built is a UsageError (exit 2), as Bazel
    and Cargo refuse an explicitly named target they cannot build: a `--binary` left
    with nothing (its outputs, platforms or hosts rule it out), or an `--output` or
    `--platform` under which nothing at all is left. Groups alone (`--target`, or
    all binaries by default) that leave nothing are an outcome, not an error: the
    returned note says what was selected and why nothing remains (a CI job may run a
    group on a host none of its binaries builds on). '' when there is something to
    build and every named binary is part of it.
    """
    reasons = {skip.binary: skip.reason for skip in plan.skips}
    named = [name for name in selection.binaries if name in reasons]
    if plan.actions and not named:
        return ""
    if plan.actions:
        lines = [f"  {name}: {reasons[name]}" for name in named]
        raise UsageError(
            f"{_flags(selection)}: cannot build {', '.join(named)}:\n"
            + "\n".join(lines)
            + "\nleave it out of --binary, or change the selection or binaries.yaml"
        )
    lines = [f"  {skip.binary}: {skip.reason}" for skip in plan.skips]
    if not lines:
        lines = ["  the selection holds no binaries"]
    text = f"nothing to build for {_flags(selection)}:\n" + "\n".join(lines)
    if selection.binaries or selection.outputs or selection.platforms:
        raise UsageError(
            text + "\nchange --binary/--output/--platform, or the binary's entry in binaries.yaml"
        )
    return text
