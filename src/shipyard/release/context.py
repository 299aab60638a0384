"""What every release stage shares: the options, the context it reads and fills, results."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from shipyard.dist import dist_dir, release_dir
from shipyard.engine.plan import Plan
from shipyard.engine.run import BuildRun
from shipyard.engine.scheduler import Builder
from shipyard.manifest import Binary, Image, Manifest
from shipyard.oci.remote.push import variant_tags
from shipyard.oci.remote.registry import Registry
from shipyard.release.index import PackageIndex
from shipyard.release.staged import StagedRelease
from shipyard.stamp import Stamp

if TYPE_CHECKING:
    from shipyard.release.keys import SigningKey

__all__ = ["ReleaseContext", "ReleaseOptions", "Stage", "StageResult", "StageStatus"]

StageStatus = Literal["ran", "skipped", "failed"]


@dataclass(frozen=True)
class ReleaseOptions:
    """What the user asked of a release (the CLI flags)."""

    version: str | None = None  # None: from the manifest / git describe
    snapshot: bool = False  # build and stage a dev version; publish nothing
    dry_run: bool = False  # report every publish step; publish nothing
    allow_dirty: bool = False
    clean: bool = False  # replace an existing dist/release/<version>
    jobs: int | None = None
    cache_dir: Path | None = None
    remote: str | None = None  # --cache=URL: a shared cache, as a build's
    cache_mode: str | None = None  # --cache-mode, as a build's
    force_protected: bool = False  # push to image.protected hubs outside CI
    clobber: bool = False  # move existing tags that are not image.movable_tags
    signing_key: Path | None = None  # --signing-key; else $SHIPYARD_SIGNING_KEY


@dataclass(frozen=True)
class StageResult:
    """What happened to one stage: an outcome, never an exception."""

    name: str
    status: StageStatus
    reason: str = ""
    duration: float = 0.0


@dataclass
class ReleaseContext:
    """The edge's decisions (read once) plus what earlier stages found, for later ones.

    `stamp` is provisional until preflight has checked the version; `staged` is the
    parsed release.json once the stage stage wrote it (or a resumed run read it).
    """

    manifest: Manifest
    plan: Plan
    stamp: Stamp
    options: ReleaseOptions
    env: Mapping[str, str]
    builders: Mapping[str, Builder]
    registry_for: Callable[[str], Registry]
    index: PackageIndex | None
    on_step: Callable[[str], None] = lambda _: None
    build: BuildRun | None = None
    staged: StagedRelease | None = None
    # The provenance envelopes publish attaches: the bytes its check of the folder read.
    provenance: tuple[bytes, ...] = ()
    resuming: bool = False
    results: list[StageResult] = field(default_factory=list)
    # The release's signing key, loaded by preflight (None: the release is not signed).
    signing_key: SigningKey | None = None

    @property
    def root(self) -> Path:
        """The repository root."""
        return self.manifest.root

    @property
    def dist(self) -> Path:
        """The output folder, <root>/dist."""
        return dist_dir(self.root)

    @property
    def release_dir(self) -> Path:
        """dist/release/<version>; a dry run stages beside it, never in it."""
        return release_dir(self.dist, self.stamp.version, dry_run=self.options.dry_run)

    @property
    def publishing(self) -> bool:
        """False for snapshots: nothing leaves the machine."""
        return not self.options.snapshot

    def binary(self, name: str) -> Binary:
        """The selected binary called `name`."""
        return next(b for b in self.plan.binaries if b.name == name)

    def version_of(self, binary: str) -> str:
        """The version `binary` ships: its own wheel's when its project declares one
        (static, a version file), else the release's."""
        for result in self.build.results if self.build else ():
            if binary in result.action.binaries and result.version:
                return result.version
        return self.stamp.version

    def libraries(self) -> frozenset[str]:
        """The in-repo libraries (project keys) the released wheels require: released
        with them, so what the index serves installs."""
        workspace = self.plan.workspace
        if workspace is None:
            return frozenset()
        needed: set[str] = set()
        for binary in self.plan.binaries:
            project = workspace.project_at(binary.source) if "wheel" in binary.outputs else None
            if project is not None:
                needed.update(lib.key for lib in workspace.closure(project.key, binary.extras))
        return frozenset(needed)

    def image_binaries(self) -> tuple[Binary, ...]:
        """The selected binaries that have an image output."""
        return tuple(b for b in self.plan.binaries if "image" in b.outputs)

    def movable_tags(self, name: str, variant: str = "") -> tuple[str, ...]:
        """The tags a release may move off another image for binary `name`: for an
        image variant, the movable tags suffixed with its name (`latest-debug`)."""
        found = next((b for b in self.plan.binaries if b.name == name), None)
        movable = found.image.movable_tags if found is not None else Image().movable_tags
        return variant_tags(movable, variant)

    def variant_image_tags(self, binary: Binary) -> dict[str, tuple[str, ...]]:
        """Every image a release pushes for `binary`, by variant ("" the default): its tags."""
        tags = self.image_tags(binary)
        return {v: variant_tags(tags, v) for v in ("", *sorted(binary.image.variants))}

    def image_tags(self, binary: Binary) -> tuple[str, ...]:
        """The version tag first (`+` -> `-`), then the manifest's tags, deduplicated."""
        return tuple(dict.fromkeys((self.stamp.tag, *binary.image.tags)))


class Stage(Protocol):
    """One step of a release: a name, `run`, and `skip` returning a reason or None."""

    name: str

    def skip(self, ctx: ReleaseContext) -> str | None:
        """Why this stage does not run for `ctx`, or None when it does."""
        ...

    def run(self, ctx: ReleaseContext) -> None:
        """Do the stage's work; raise a ShipyardError on failure."""
        ...
