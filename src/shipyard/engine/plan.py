"""Selection and the action graph: what a build will do, before it does anything."""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard.engine.inputs import SourceFolders
from shipyard.engine.selecting import nothing_left, selected_binaries
from shipyard.errors import UsageError
from shipyard.manifest import OUTPUT_KINDS, Binary, Image, Manifest, Stage, Zipapp

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
    # inputs; nor are the repository's binaries.yaml and uv.lock (`SourceFolders`).
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


class _Graph:
    """The actions being planned: one wheel per distinct source, shared by every binary
    and library built from it; a zipapp and an image per binary."""

    def __init__(self, manifest: Manifest, workspace: Workspace | None) -> None:
        self.manifest = manifest
        self.workspace = workspace
        self.folders = SourceFolders(manifest, workspace)
        self.actions: dict[str, Action] = {}
        self.wheel_of: dict[Path, str] = {}
        self.wanted: set[str] = set()  # wheels asked for as outputs

    def wheel(self, source: Path, binary: str | None, project: str) -> str:
        """The wheel action of `source`, made or joined by `binary` (None: a library)."""
        wheel_id = self.wheel_of.get(source)
        if wheel_id is None:
            wheel_id = f"wheel:{source.relative_to(self.manifest.root)}"
            self.wheel_of[source] = wheel_id
            self.actions[wheel_id] = Action(
                wheel_id,
                "wheel",
                (binary,) if binary else (),
                source,
                nested=self.folders.nested(source),
                project=project,
            )
        elif binary and binary not in self.actions[wheel_id].binaries:
            previous = self.actions[wheel_id]
            binaries = (*previous.binaries, binary)
            self.actions[wheel_id] = dataclasses.replace(previous, binaries=binaries)
        return wheel_id

    def add(self, binary: Binary, selection: Selection) -> str:
        """Add the actions of `binary` that `selection` asks for; why it has none, or ''.

        Every output kind starts from the wheel of the binary's source and, with a
        workspace, the wheel of every in-repository library its project needs.
        """
        outputs = [o for o in binary.outputs if not selection.outputs or o in selection.outputs]
        # Zipapps are for every platform the binary names; images for its Linux ones.
        own = {"zipapp": binary.platforms, "image": binary.image_platforms}
        chosen = {
            kind: tuple(p for p in names if not selection.platforms or p in selection.platforms)
            for kind, names in own.items()
        }
        platforms = tuple(dict.fromkeys(p for o in outputs if o in own for p in chosen[o]))
        reason = nothing_left(binary, outputs, platforms, selection)
        if reason:
            return reason
        workspace = self.workspace
        project = workspace.project_at(binary.source) if workspace is not None else None
        key = project.key if project is not None else ""
        wheel_id = self.wheel(binary.source, binary.name, key)
        runnable = [k for k in ("zipapp", "image") if k in outputs and chosen[k]]
        libraries: tuple[str, ...] = ()
        if (runnable or "wheel" in outputs) and workspace is not None and project is not None:
            # Zipapps and images install these (through the binary's extras too); a wheel
            # output comes with them, so `pip install dist/wheels/*.whl` finds every
            # in-repo requirement.
            libraries = tuple(
                self.wheel(lib.root, None, lib.key) for lib in workspace.closure(key, binary.extras)
            )
        for kind in runnable:
            self._runnable(binary, kind, chosen[kind], (wheel_id, *libraries), key)
        if "wheel" in outputs:
            self.wanted.update((wheel_id, *libraries))
        return ""

    def _runnable(
        self, binary: Binary, kind: str, platforms: tuple[str, ...], deps: tuple[str, ...], key: str
    ) -> None:
        """The zipapp or image action of `binary`."""
        action_id = f"{kind}:{binary.name}"
        self.actions[action_id] = Action(
            action_id,
            kind,
            (binary.name,),
            binary.source,
            platforms,
            deps,
            entrypoint=binary.entrypoint,
            image=binary.image if kind == "image" else None,
            zipapp=binary.zipapp if kind == "zipapp" else None,
            requirements=binary.requirements,
            project=key,
            extras=binary.extras,
            pythons=_pythons(self.manifest, binary, kind),
        )

    def ordered(self) -> tuple[Action, ...]:
        """The actions by kind, then id; a wheel stays when a binary asked for it or
        another action needs it."""
        wanted = self.wanted | {d for a in self.actions.values() for d in a.deps}
        kept = [a for a in self.actions.values() if a.kind != "wheel" or a.id in wanted]
        return tuple(sorted(kept, key=lambda a: (OUTPUT_KINDS.index(a.kind), a.id)))


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
    for binary in selected_binaries(manifest, selection):
        if this_os in binary.host:
            chosen.append(binary)
        else:
            hosts = ", ".join(binary.host)
            skips.append(
                Skip(binary.name, f"host is {this_os}; {binary.name} builds only on {hosts}")
            )
    graph = _Graph(manifest, workspace)
    for binary in chosen:
        reason = graph.add(binary, selection)
        if reason:
            skips.append(Skip(binary.name, reason))
    return Plan(manifest, tuple(chosen), graph.ordered(), tuple(skips), workspace)


def _pythons(manifest: Manifest, binary: Binary, kind: str) -> tuple[str, ...]:
    """The target Pythons of `binary`'s `kind` action: every one for a zipapp; for an
    image, the first (the default image's) and those of its per-Python variants."""
    first = manifest.project.pythons[:1]
    if kind == "zipapp":
        return manifest.project.pythons
    extra = (v.python for v in binary.image.variants.values() if v.python)
    return tuple(dict.fromkeys((*first, *sorted(extra, key=manifest.project.pythons.index))))


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
