"""Selection and the action graph: what a build will do, before it does anything."""

from __future__ import annotations

import bisect
import hashlib
import itertools
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from shipyard.errors import UsageError
from shipyard.manifest import (
    OUTPUT_KINDS,
    PLATFORMS,
    Binary,
    Image,
    Manifest,
    Zipapp,
    did_you_mean,
)

__all__ = ["Action", "Plan", "Selection", "Skip", "host_os", "make_plan", "shard", "split_flag"]


def host_os() -> str:
    """This machine's OS in manifest terms (linux, darwin, windows)."""
    return {"win32": "windows", "cygwin": "windows"}.get(sys.platform, sys.platform)


def split_flag(values: Iterable[str] | None) -> tuple[str, ...]:
    """Flags are repeatable and take comma-separated lists: flatten, trim, dedupe."""
    out: list[str] = []
    for value in values or ():
        out.extend(part.strip() for part in value.split(",") if part.strip())
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class Selection:
    """What the user asked for: groups, binaries, output kinds and platforms."""

    targets: tuple[str, ...] = ()
    binaries: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    platforms: tuple[str, ...] = ()


@dataclass(frozen=True)
class Skip:
    """A binary left out on purpose, with the reason: an outcome, not an error."""

    binary: str
    reason: str


@dataclass(frozen=True)
class Action:
    """One unit of work in the graph; `id` is unique and stable across runs."""

    id: str
    kind: str
    binaries: tuple[str, ...]
    source: Path
    platforms: tuple[str, ...] = ()
    deps: tuple[str, ...] = ()
    # Other binaries' sources inside this one (say, examples under the repository
    # root): separate projects, so their files are not this action's inputs.
    nested: tuple[Path, ...] = ()
    entrypoint: str = ""  # module:function (zipapps and images)
    image: Image | None = None  # the binary's merged image settings (images)
    zipapp: Zipapp | None = None  # the binary's merged zipapp settings (zipapps)
    requirements: Path | None = None  # a hash-pinned lock file to install from

    def to_json(self, root: Path) -> dict[str, object]:
        """A JSON-ready view with repository-relative paths."""
        return {
            "id": self.id,
            "kind": self.kind,
            "binaries": list(self.binaries),
            "source": str(self.source.relative_to(root)),
            "platforms": list(self.platforms),
            "deps": list(self.deps),
        }


@dataclass(frozen=True)
class Plan:
    """The deduplicated actions in dependency order, and what was skipped."""

    manifest: Manifest
    binaries: tuple[Binary, ...]
    actions: tuple[Action, ...]
    skips: tuple[Skip, ...] = field(default=())

    def to_json(self) -> dict[str, object]:
        """The plan as printed by `shipyard plan --json`."""
        root = self.manifest.root
        return {
            "project": self.manifest.project.name,
            "binaries": [b.name for b in self.binaries],
            "actions": [a.to_json(root) for a in self.actions],
            "skips": [{"binary": s.binary, "reason": s.reason} for s in self.skips],
        }


def _check_choices(flag: str, values: Sequence[str], choices: Iterable[str]) -> None:
    known = tuple(choices)
    for value in values:
        if value not in known:
            hint = did_you_mean(value, known) or "choose from: " + ", ".join(known)
            raise UsageError(f"{flag}={value}: unknown value; {hint}")


def _select(manifest: Manifest, selection: Selection) -> tuple[Binary, ...]:
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


class _Sources:
    """Every binary's source, for finding the sources nested inside one in O(log n)."""

    def __init__(self, manifest: Manifest) -> None:
        # Sorted by path parts, a source's descendants follow it contiguously.
        self.parts = sorted({b.source.parts for b in manifest.binaries.values()})

    def nested(self, source: Path) -> tuple[Path, ...]:
        """The other sources strictly inside `source`, sorted."""
        prefix = source.parts
        start = bisect.bisect_right(self.parts, prefix)
        inside: list[Path] = []
        for parts in itertools.islice(self.parts, start, None):
            if parts[: len(prefix)] != prefix:
                break
            inside.append(Path(*parts))
        return tuple(sorted(inside))


def make_plan(manifest: Manifest, selection: Selection, this_os: str | None = None) -> Plan:
    """Expand a selection into the deduplicated action graph.

    One wheel per distinct source; a zipapp per binary over its platforms; an
    image per binary. Each depends on the wheel of its source.
    """
    this_os = this_os or host_os()
    skips: list[Skip] = []
    chosen: list[Binary] = []
    for binary in _select(manifest, selection):
        if this_os not in binary.host:
            skips.append(
                Skip(
                    binary.name,
                    f"host is {this_os}; {binary.name} builds only on " + ", ".join(binary.host),
                )
            )
        else:
            chosen.append(binary)
    actions: dict[str, Action] = {}
    wheel_of: dict[Path, str] = {}
    sources = _Sources(manifest)
    for binary in chosen:
        outputs = [o for o in binary.outputs if not selection.outputs or o in selection.outputs]
        platforms = tuple(
            p for p in binary.platforms if not selection.platforms or p in selection.platforms
        )
        if not outputs:
            continue
        # Every output kind starts from the wheel of the binary's source.
        wheel_id = wheel_of.get(binary.source)
        if wheel_id is None:
            rel = binary.source.relative_to(manifest.root)
            wheel_id = f"wheel:{rel}"
            wheel_of[binary.source] = wheel_id
            actions[wheel_id] = Action(
                wheel_id,
                "wheel",
                (binary.name,),
                binary.source,
                nested=sources.nested(binary.source),
            )
        else:
            previous = actions[wheel_id]
            actions[wheel_id] = Action(
                wheel_id,
                "wheel",
                (*previous.binaries, binary.name),
                binary.source,
                nested=previous.nested,
            )
        for kind in ("zipapp", "image"):
            if kind in outputs and platforms:
                action_id = f"{kind}:{binary.name}"
                actions[action_id] = Action(
                    action_id,
                    kind,
                    (binary.name,),
                    binary.source,
                    platforms,
                    (wheel_id,),
                    entrypoint=binary.entrypoint,
                    image=binary.image if kind == "image" else None,
                    zipapp=binary.zipapp if kind == "zipapp" else None,
                    requirements=binary.requirements,
                )
        if "wheel" not in outputs and not any(a.deps == (wheel_id,) for a in actions.values()):
            del actions[wheel_id]
    ordered = sorted(actions.values(), key=lambda a: (OUTPUT_KINDS.index(a.kind), a.id))
    return Plan(manifest, tuple(chosen), tuple(ordered), tuple(skips))


def shard(plan: Plan, index: int, count: int) -> Plan:
    """Shard `index` of `count` (1-based): a deterministic slice of the actions.

    An action belongs to the shard its id hashes to; a shard also runs the
    dependencies of its actions (from the shared cache when another shard built
    them first). Every action is in at least one shard.
    """
    if not 1 <= index <= count:
        raise UsageError(f"--shard={index}/{count}: write I/N with 1 <= I <= N")
    by_id = {a.id: a for a in plan.actions}

    def mine(action: Action) -> bool:
        digest = hashlib.sha256(action.id.encode()).digest()
        return int.from_bytes(digest[:8], "big") % count == index - 1

    wanted: set[str] = set()
    stack = [a.id for a in plan.actions if mine(a)]
    while stack:
        action_id = stack.pop()
        if action_id not in wanted:
            wanted.add(action_id)
            stack.extend(by_id[action_id].deps)
    kept = tuple(a for a in plan.actions if a.id in wanted)
    return Plan(plan.manifest, plan.binaries, kept, plan.skips)
