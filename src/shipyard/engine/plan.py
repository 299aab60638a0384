"""Selection and the action graph: what a build will do, before it does anything."""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import itertools
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard.errors import UsageError
from shipyard.manifest import (
    OUTPUT_KINDS,
    PLATFORMS,
    Binary,
    Image,
    Manifest,
    Stage,
    Zipapp,
    did_you_mean,
)
from shipyard.stamp import Inputs

if TYPE_CHECKING:
    from shipyard.workspace import Workspace

__all__ = [
    "Action",
    "Plan",
    "Selection",
    "Skip",
    "host_os",
    "make_plan",
    "shard",
    "split_flag",
    "unbuildable",
    "version_inputs",
]


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
    # Other binaries' sources and projects inside this one (say, examples under the
    # repository root): separate projects, so their files are not this action's
    # inputs; nor are the repository's binaries.yaml and uv.lock (see `make_plan`).
    nested: tuple[Path, ...] = ()
    entrypoint: str = ""  # module:function (zipapps and images)
    image: Image | None = None  # the binary's merged image settings (images)
    zipapp: Zipapp | None = None  # the binary's merged zipapp settings (zipapps)
    requirements: Path | None = None  # a hash-pinned lock file to install from
    extras: tuple[str, ...] = ()  # the binary's own project's extras to install with it
    # The normalised name of the binary's own project (its pyproject.toml), when known:
    # which wheel among the deps is the binary's, and its slice of uv.lock.
    project: str = ""
    # The target Pythons the action builds for (zipapps and images; project.python):
    # a zipapp resolves for each, an image builds one per Python (see Image.variants).
    # Empty: the build context's one Python.
    pythons: tuple[str, ...] = ()
    # A test stage (kind "test"): its name and its settings, defaults and binaries.yaml
    # merged (see shipyard.stages).
    stage: str = ""
    test: Stage | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """What names the action's log: its binaries, its project (a library's wheel),
        or its project and stage (a test stage)."""
        if self.stage:  # '.' is in neither a normalised project name nor a stage name
            return (f"{self.project}.{self.stage}",)
        return self.binaries or (self.project,)

    def to_json(self, root: Path) -> dict[str, object]:
        """A JSON-ready view with repository-relative paths."""
        out: dict[str, object] = {
            "id": self.id,
            "kind": self.kind,
            "binaries": list(self.binaries),
            "source": str(self.source.relative_to(root)),
            "platforms": list(self.platforms),
            "deps": list(self.deps),
        }
        if self.project:
            out["project"] = self.project
        if self.stage:
            out["stage"] = self.stage
        if self.pythons:
            out["pythons"] = list(self.pythons)
        return out


@dataclass(frozen=True)
class Plan:
    """The deduplicated actions in dependency order, and what was skipped."""

    manifest: Manifest
    binaries: tuple[Binary, ...]
    actions: tuple[Action, ...]
    skips: tuple[Skip, ...] = field(default=())
    # The repository's projects and uv.lock the plan was made with (None: not read).
    workspace: Workspace | None = field(default=None, compare=False)

    @property
    def binary_names(self) -> tuple[str, ...]:
        """The names of the binaries the plan builds."""
        return tuple(b.name for b in self.binaries)

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
    """Every binary's source and every project's folder, for finding those nested
    inside one source in O(log n)."""

    def __init__(self, manifest: Manifest, workspace: Workspace | None = None) -> None:
        folders = {b.source.parts for b in manifest.binaries.values()}
        if workspace is not None:
            folders.update(p.root.parts for p in workspace.projects.values())
        # Sorted by path parts, a source's descendants follow it contiguously.
        self.parts = sorted(folders)

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


def make_plan(
    manifest: Manifest,
    selection: Selection,
    this_os: str | None = None,
    workspace: Workspace | None = None,
) -> Plan:
    """Expand a selection into the deduplicated action graph.

    One wheel per distinct source; a zipapp per binary over its platforms; an
    image per binary. Each depends on the wheel of its source and, with a
    `workspace`, on the wheel of every in-repository library its project needs
    (one wheel action per library, shared by every binary that needs it).
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
    wanted: set[str] = set()
    sources = _Sources(manifest, workspace)

    def shared_files(source: Path) -> tuple[Path, ...]:
        # The manifest and the lock are every binary's inputs through its entry and
        # its slice (keys, `affected`), not through the source that happens to hold them.
        files = (manifest.path, manifest.root / "uv.lock")
        return tuple(f for f in files if f.parent == source)

    def wheel(source: Path, binary: str | None, project: str) -> str:
        """The wheel action of `source`, made or joined by `binary` (None: a library)."""
        wheel_id = wheel_of.get(source)
        if wheel_id is None:
            wheel_id = f"wheel:{source.relative_to(manifest.root)}"
            wheel_of[source] = wheel_id
            actions[wheel_id] = Action(
                wheel_id,
                "wheel",
                (binary,) if binary else (),
                source,
                nested=sources.nested(source) + shared_files(source),
                project=project,
            )
        elif binary and binary not in actions[wheel_id].binaries:
            previous = actions[wheel_id]
            binaries = (*previous.binaries, binary)
            actions[wheel_id] = dataclasses.replace(previous, binaries=binaries)
        return wheel_id

    for binary in chosen:
        outputs = [o for o in binary.outputs if not selection.outputs or o in selection.outputs]
        # Zipapps are for every platform the binary names; images for its Linux ones.
        own = {"zipapp": binary.platforms, "image": binary.image_platforms}
        chosen_platforms = {
            kind: tuple(p for p in names if not selection.platforms or p in selection.platforms)
            for kind, names in own.items()
        }
        platforms = tuple(
            dict.fromkeys(p for o in outputs if o in own for p in chosen_platforms[o])
        )
        reason = _nothing_left(binary, outputs, platforms, selection)
        if reason:
            skips.append(Skip(binary.name, reason))
            continue
        project = workspace.project_at(binary.source) if workspace is not None else None
        key = project.key if project is not None else ""
        # Every output kind starts from the wheel of the binary's source.
        wheel_id = wheel(binary.source, binary.name, key)
        runnable = [k for k in ("zipapp", "image") if k in outputs and chosen_platforms[k]]
        libraries: tuple[str, ...] = ()
        if (runnable or "wheel" in outputs) and workspace is not None and project is not None:
            # Zipapps and images install these (through the binary's extras too); a wheel
            # output comes with them, so `pip install dist/wheels/*.whl` finds every
            # in-repo requirement.
            libraries = tuple(
                wheel(lib.root, None, lib.key) for lib in workspace.closure(key, binary.extras)
            )
        for kind in runnable:
            action_id = f"{kind}:{binary.name}"
            actions[action_id] = Action(
                action_id,
                kind,
                (binary.name,),
                binary.source,
                chosen_platforms[kind],
                (wheel_id, *libraries),
                entrypoint=binary.entrypoint,
                image=binary.image if kind == "image" else None,
                zipapp=binary.zipapp if kind == "zipapp" else None,
                requirements=binary.requirements,
                project=key,
                extras=binary.extras,
                pythons=_pythons(manifest, binary, kind),
            )
        if "wheel" in outputs:
            wanted.update((wheel_id, *libraries))
    # A wheel stays when a binary asked for it or another action needs it.
    wanted.update(d for a in actions.values() for d in a.deps)
    kept = [a for a in actions.values() if a.kind != "wheel" or a.id in wanted]
    ordered = sorted(kept, key=lambda a: (OUTPUT_KINDS.index(a.kind), a.id))
    return Plan(manifest, tuple(chosen), tuple(ordered), tuple(skips), workspace)


def _pythons(manifest: Manifest, binary: Binary, kind: str) -> tuple[str, ...]:
    """The target Pythons of `binary`'s `kind` action: every one for a zipapp; for an
    image, the first (the default image's) and those of its per-Python variants."""
    first = manifest.project.pythons[:1]
    if kind == "zipapp":
        return manifest.project.pythons
    extra = (v.python for v in binary.image.variants.values() if v.python)
    return tuple(dict.fromkeys((*first, *sorted(extra, key=manifest.project.pythons.index))))


def _nothing_left(
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


def version_inputs(plan: Plan) -> dict[str, Inputs]:
    """Each action's versioned inputs: its source and the folders of the in-repository
    libraries its project needs (transitively, with the binary's extras), without the
    other binaries' and projects' folders nested in them. A binary's wheel, zipapp and
    image share one set, and so one version.
    """
    root = plan.manifest.root
    by_id = {a.id: a for a in plan.actions}
    workspace = plan.workspace

    def rel(path: Path) -> str:
        text = path.relative_to(root).as_posix()
        return "" if text == "." else text

    found: dict[str, Inputs] = {}
    for action in plan.actions:
        own = by_id.get(action.deps[0], action) if action.deps else action
        folders = [action.source]
        if workspace is not None and action.project in workspace.projects:
            # A wheel has no extras of its own: those of every binary built from its
            # source, selected or not, so its version does not follow the selection.
            extras = action.extras
            if action.kind == "wheel":
                extras = tuple(
                    e for b in plan.manifest.binaries.values() if b.source == action.source
                    for e in b.extras
                )  # fmt: skip
            folders += [lib.root for lib in workspace.closure(action.project, extras)]
        include = tuple(dict.fromkeys(rel(f) for f in folders))
        exclude = tuple(e for e in (rel(n) for n in own.nested) if e not in include)
        found[action.id] = Inputs(include, exclude)
    return found


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
    return Plan(plan.manifest, plan.binaries, kept, plan.skips, plan.workspace)
