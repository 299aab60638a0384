"""The validated manifest as plain frozen values, and the names it may use.

Nothing here imports pydantic: a build whose manifest is unchanged never needs it
(see _load.py), which keeps a no-op build fast.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shipyard._units import parse_size
from shipyard.errors import UsageError

__all__ = [
    "ALL_GROUP",
    "HOST_OS",
    "IMAGE_PLATFORMS",
    "MANIFEST_NAME",
    "OUTPUT_KINDS",
    "PLATFORMS",
    "Binary",
    "Image",
    "Manifest",
    "Project",
    "SizeBudget",
    "Variant",
    "Zipapp",
    "did_you_mean",
    "find_manifest",
    "parse_size",
]

OUTPUT_KINDS = ("wheel", "zipapp", "image")
HOST_OS = ("linux", "darwin", "windows")
# The Linux platforms: an image's (and a zipapp's).
IMAGE_PLATFORMS = (
    "linux/amd64",
    "linux/arm64",
    "linux/arm/v7",
    "linux/386",
    "linux/ppc64le",
    "linux/s390x",
    "linux/riscv64",
)
# The OCI platforms Python wheels are published for; a typo here is better caught
# than turned into an empty resolution later. macOS and Windows are zipapp platforms
# only (a command-line tool runs on laptops; images stay Linux).
PLATFORMS = (
    *IMAGE_PLATFORMS,
    "darwin/amd64",
    "darwin/arm64",
    "windows/amd64",
    "windows/arm64",
)
MANIFEST_NAME = "binaries.yaml"
ALL_GROUP = "all"
_DEFAULT_MOVABLE_TAGS = ("latest",)
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(s|m|h)")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_duration(value: str | int) -> float:
    """Seconds in a duration: an integer of seconds, or `90s`, `10m`, `1.5h`. ValueError
    names the fix."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return float(value)
    found = _DURATION.fullmatch(value.strip()) if isinstance(value, str) else None
    if found is None or float(found.group(1)) <= 0:
        raise ValueError("write a duration such as 90 (seconds), 90s, 10m or 1h")
    return float(found.group(1)) * _DURATION_UNITS[found.group(2)]


@dataclass(frozen=True)
class Service:
    """A process a test stage needs running: `start` runs it (with `{port}`, a free
    loopback port), `ready` says when it is up (None: the port accepts connections)."""

    name: str
    start: str
    ready: str | None = None
    timeout: float = 30.0
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Stage:
    """One stage's settings as binaries.yaml writes them (None: not said there)."""

    command: str | None = None
    groups: tuple[str, ...] | None = None
    env: Mapping[str, str] | None = None
    timeout: float | None = None
    services: tuple[Service, ...] | None = None
    requirements: tuple[str, ...] | None = None

    def over(self, base: Stage) -> Stage:
        """These settings with `base`'s filling what these do not say."""
        return Stage(
            self.command if self.command is not None else base.command,
            self.groups if self.groups is not None else base.groups,
            self.env if self.env is not None else base.env,
            self.timeout if self.timeout is not None else base.timeout,
            self.services if self.services is not None else base.services,
            self.requirements if self.requirements is not None else base.requirements,
        )


# A stage's entry: its settings, or None where binaries.yaml turns it off (`false`).
StageEntry = Stage | None


@dataclass(frozen=True)
class Tests:
    """The manifest's `tests:` section: stages of every project, and per project (a
    project mapped to None is off)."""

    stages: Mapping[str, StageEntry] = field(default_factory=dict)
    projects: Mapping[str, Mapping[str, StageEntry] | None] = field(default_factory=dict)


@dataclass(frozen=True)
class SizeBudget:
    """The allowed size of one output kind, in bytes (None: no limit that way)."""

    min: int | None = None
    max: int | None = None


@dataclass(frozen=True)
class Variant:
    """An image variant: the image built again on another base, with env overrides;
    pushed with tags suffixed `-<name>`.

    `python` is set on the variants a list of target Pythons adds (`python3.12`,
    `debug-python3.12`): their site is resolved for that Python. None: the image's
    (the first target Python).
    """

    base: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    python: str | None = None


@dataclass(frozen=True)
class Image:
    """A binary's image settings after defaults are merged in."""

    base: str | None = None
    hubs: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    user: str | None = None
    workdir: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    dockerfile: str | None = None
    # The image's platforms: `image.platforms`, else the binary's (Linux: a binary with
    # an image whose platforms include macOS or Windows is a manifest error).
    platforms: tuple[str, ...] = ()
    variants: Mapping[str, Variant] = field(default_factory=dict)
    # Hubs (from `hubs`) pushed to only when CI is set or with --force-protected.
    protected: tuple[str, ...] = ()
    # Tags a release may move from another digest (no-clobber spares them).
    movable_tags: tuple[str, ...] = _DEFAULT_MOVABLE_TAGS
    # Libraries native code may need that neither the base nor the image has ("*": any).
    allow_missing_libraries: tuple[str, ...] = ()


@dataclass(frozen=True)
class Zipapp:
    """A binary's zipapp settings after defaults are merged in."""

    shebang: str = "/usr/bin/env python3"
    compress: bool = True
    compile: bool = False


@dataclass(frozen=True)
class Binary:
    """One program to ship, with every default applied and paths resolved."""

    name: str
    source: Path
    entrypoint: str
    outputs: tuple[str, ...]
    platforms: tuple[str, ...]
    host: tuple[str, ...]
    image: Image
    smoke: tuple[str, ...]
    zipapp: Zipapp = Zipapp()
    requirements: Path | None = None
    # The binary's own project's extras, installed into its zipapp and image.
    extras: tuple[str, ...] = ()
    # Size budgets by output kind (wheel, zipapp, image).
    size: Mapping[str, SizeBudget] = field(default_factory=dict)

    @property
    def module(self) -> str:
        """The module part of the entry point."""
        return self.entrypoint.partition(":")[0]

    @property
    def image_platforms(self) -> tuple[str, ...]:
        """The platforms of the binary's image: `image.platforms`, else its own."""
        return self.image.platforms or self.platforms


@dataclass(frozen=True)
class Project:
    """The repository-wide settings.

    `python` is the first target Python (the default image's, the one a single
    zipapp is checked against first); `pythons` every target Python in manifest
    order, `python` first (filled in from `python` when not given). `python` may
    be given as the list itself (as the manifest's model holds it): it is split so.
    """

    name: str
    version: str
    python: str
    pythons: tuple[str, ...] = ()
    versioning: str | None = None  # "lockstep", "per-binary", None: as the pins imply
    tag_prefix: str = ""  # what version tags start with; "{project}" is a binary's project

    def tag_prefix_for(self, project: str = "") -> str:
        """`tag_prefix` with `{project}` filled in: `project`, else the repository's name."""
        return self.tag_prefix.replace("{project}", project or self.name)

    def __post_init__(self) -> None:
        given: Any = self.python
        if not isinstance(given, str):
            # The list the manifest's model holds (project.python as written): its
            # first is `python`, all of it `pythons`.
            versions = tuple(str(v) for v in given)
            object.__setattr__(self, "python", versions[0])
            object.__setattr__(self, "pythons", versions)
        elif not self.pythons:
            object.__setattr__(self, "pythons", (self.python,))
        elif not isinstance(self.pythons, tuple):
            object.__setattr__(self, "pythons", tuple(self.pythons))


@dataclass(frozen=True)
class Manifest:
    """A validated binaries.yaml; groups are resolved to binary names, `all` included."""

    path: Path
    root: Path
    project: Project
    binaries: Mapping[str, Binary]
    groups: Mapping[str, tuple[str, ...]]
    tests: Tests = field(default_factory=Tests)


def did_you_mean(word: str, choices: typing.Iterable[str]) -> str:
    """A ' did you mean ...?' suffix for the closest choice, or ''."""
    if len(word) > 100:  # no name is this long; difflib would only spend time on it
        return ""
    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    if not close:
        return ""
    from shipyard.manifest._report import shown  # the manifest's words, escaped and cut

    return f"did you mean {shown(close[0])}?"


def find_manifest(start: Path) -> Path:
    """binaries.yaml in `start` or its nearest parent, as nox and invoke find theirs."""
    for folder in (start, *start.parents):
        candidate = folder / MANIFEST_NAME
        if candidate.is_file():
            return candidate
    raise UsageError(
        f"no {MANIFEST_NAME} in {start} or any parent folder; "
        "create one (shipyard init; see docs/guide/manifest.md) or pass -f PATH"
    )
