"""The manifest's shape as pydantic models: one source for validation and the JSON Schema.

The models say which keys a document has and what each holds; the grammar of each
value (names, tags, hubs, commands, durations...) is `_grammar`'s.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator
from pydantic_core import PydanticCustomError

from shipyard.manifest._grammar import (
    PYTHON_SCHEMA,
    BaseImage,
    Command,
    Duration,
    EntryPoint,
    EnvName,
    GroupName,
    HostOS,
    Hub,
    Line,
    LinuxPlatform,
    Name,
    Output,
    Platform,
    ProjectVersion,
    PythonVersion,
    Size,
    StageName,
    Tag,
    Text,
    User,
)

__all__ = [
    "BinaryDoc",
    "DefaultsDoc",
    "ImageDoc",
    "ManifestDoc",
    "ProjectDoc",
    "ServiceDoc",
    "SizeDoc",
    "StageDoc",
    "TestsDoc",
    "VariantDoc",
    "ZipappDoc",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class VariantDoc(_Strict):
    """An image variant: the same image on another base, with env overrides."""

    base: BaseImage | None = Field(None, description="The variant's base (default: the image's)")
    env: dict[EnvName, Text] | None = Field(None, description="Environment merged over the image's")


class ImageDoc(_Strict):
    """How a binary's OCI image is made and where it is pushed."""

    base: BaseImage | None = Field(
        None,
        description="Base image: oci-layout:PATH, docker-archive:PATH, rootfs:PATH;PLATFORM "
        "or HOST[:PORT]/REPO[:TAG][@DIGEST]; comma-separate several",
    )
    hubs: list[Hub] | None = Field(None, description="Registries/repositories to push to")
    tags: list[Tag] | None = Field(None, description="Tags to push; ${VERSION} available")
    user: User | None = Field(None, description="User the entrypoint runs as")
    workdir: Line | None = Field(
        None, description="Working directory in the image", examples=["/srv"]
    )
    env: dict[EnvName, Text] | None = Field(None, description="Environment of the entrypoint")
    labels: dict[Line, Text] | None = Field(
        None, description="Image config labels", examples=[{"org.example.team": "mesh"}]
    )
    dockerfile: Line | None = Field(
        None, description="Build with the Docker engine from this Dockerfile instead"
    )
    platforms: list[LinuxPlatform] | None = Field(
        None, min_length=1, description="The image's platforms (default: the binary's)"
    )
    variants: dict[Name, VariantDoc] | None = Field(
        None, description="Variants built beside the image, tags suffixed -<name>"
    )
    protected: list[Hub] | None = Field(
        None,
        description="Hubs (of `hubs`) pushed to only in CI or with --force-protected",
        examples=[["registry.example.com/mesh"]],
    )
    movable_tags: list[Tag] | None = Field(
        None,
        description="Tags a release may move from another digest (default [latest])",
        examples=[["latest", "stable"]],
    )
    allow_missing_libraries: list[Annotated[str, Field(pattern=r"^(\*|[^\s/]+)$")]] | None = Field(
        None,
        description="Shared libraries (file names, e.g. libcuda.so.1; '*' for all) the "
        "image's native code may need without the base or the image having them "
        "(default: none; a missing one fails the build)",
        examples=[["libcuda.so.1"]],
    )


class ZipappDoc(_Strict):
    """How a binary's zipapp is made."""

    shebang: Line | None = Field(
        None,
        description="Interpreter line (default /usr/bin/env python3)",
        examples=["/usr/bin/python3.11"],
    )
    compress: bool | None = Field(
        None, description="Deflate entries (default true)", examples=[False]
    )
    compile: bool | None = Field(
        None,
        description="Ship .pyc files; shipyard must run the target Python (default false)",
        examples=[True],
    )


class BudgetDoc(_Strict):
    """The allowed size of one output kind, e.g. {max: 40MB}."""

    min: Size | None = Field(None, description="Smallest allowed size, e.g. 1MB")
    max: Size | None = Field(None, description="Largest allowed size, e.g. 40MB or 1.5GiB")


class SizeDoc(_Strict):
    """Size budgets per output kind: a warning on build, an error in release validate."""

    wheel: BudgetDoc | None = None
    zipapp: BudgetDoc | None = None
    image: BudgetDoc | None = Field(
        None, description="Per platform: compressed layers plus config, as pulled"
    )


class DefaultsDoc(_Strict):
    """Keys merged under every binary; a binary's own keys win."""

    outputs: list[Output] | None = Field(
        default=None, min_length=1, description="Every binary's outputs unless it names its own"
    )
    platforms: list[Platform] | None = Field(
        default=None, min_length=1, description="Every binary's platforms unless it names its own"
    )
    host: list[HostOS] | None = Field(
        default=None,
        min_length=1,
        description="Host OSes that may build every binary",
        examples=[["linux"]],
    )
    image: ImageDoc | None = None
    zipapp: ZipappDoc | None = None
    smoke: list[Text] | None = Field(default=None, description="Every binary's smoke-run arguments")
    size: SizeDoc | None = None


class BinaryDoc(_Strict):
    """One program the repository ships."""

    source: Line = Field(description="Directory with the pyproject.toml that builds it")
    entrypoint: EntryPoint = Field(description="module:function that runs the program")
    outputs: list[Output] | None = Field(
        default=None, min_length=1, description="What to build (default: wheel)"
    )
    platforms: list[Platform] | None = Field(
        default=None,
        min_length=1,
        description="OCI platforms for zipapps/images; darwin/* and windows/* are zipapp-only",
        examples=[["linux/amd64", "darwin/arm64"]],
    )
    host: list[HostOS] | None = Field(None, min_length=1, description="Host OSes that may build it")
    image: ImageDoc | None = None
    zipapp: ZipappDoc | None = None
    requirements: Line | None = Field(
        None,
        description="Hash-pinned lock file (uv pip compile --generate-hashes) to install",
        examples=["apps/cli/requirements.txt"],
    )
    smoke: list[Text] | None = Field(None, description="Arguments of a smoke run, e.g. [--version]")
    extras: list[Name] | None = Field(
        None, description="Extras of the binary's project installed into its zipapp and image"
    )
    size: SizeDoc | None = None


class ServiceDoc(_Strict):
    """A process an integration stage needs running first: started before the stage,
    ready when `ready` succeeds, stopped after it."""

    name: Name = Field(description="Its name; its port is in $<NAME>_PORT (upper case, _ for -)")
    start: Command = Field(
        description="Command that runs the service in the foreground; {port} is a free "
        "loopback port shipyard chose for it"
    )
    ready: Command | None = Field(
        None,
        description="Command run until it exits 0 (default: until 127.0.0.1:{port} accepts "
        "a connection)",
        examples=["curl -fsS http://127.0.0.1:{port}/healthz"],
    )
    timeout: Duration | None = Field(
        None, description="How long it may take to be ready (30s)", examples=["20s"]
    )
    env: dict[EnvName, Text] | None = Field(
        None, description="Environment of the service", examples=[{"LOG_LEVEL": "debug"}]
    )


class StageDoc(_Strict):
    """One test stage: a command run in the project's folder, in an environment made
    from the lock (the project, its in-repo libraries and `groups`)."""

    command: Command | None = Field(
        None,
        description="Split as a shell would, run without one, e.g. python -m pytest",
        examples=["python -m mypy src"],
    )
    groups: list[GroupName] | None = Field(
        None,
        description="Dependency groups to install (default: uv's default groups, dev)",
        examples=[["dev", "types"]],
    )
    env: dict[EnvName, Text] | None = Field(
        None, description="Environment of the command", examples=[{"TZ": "UTC"}]
    )
    requirements: list[Line] | None = Field(
        None,
        description="Requirements files, relative to the project's folder, installed into "
        "the stage's environment after the lock's packages (tox's deps = -r FILE); read "
        "from the workspace root, as tox reads them",
        examples=[["test-requirements.txt"]],
    )
    timeout: Duration | None = Field(
        None, description="Longest the stage may run (30m)", examples=["10m"]
    )
    services: list[ServiceDoc] | None = Field(
        None, description="Processes started first and stopped after (integration)"
    )


StageEntry = StageDoc | Literal[False]


class TestsDoc(_Strict):
    """The test stages of the repository's projects (`shipyard test`): defaults for
    every project, overrides per project; `false` turns a stage or a project off."""

    stages: dict[StageName, StageEntry] | None = Field(
        None,
        description="Stages of every project, merged over the defaults shipyard finds "
        "(lint: ruff when configured; unit and integration: pytest when there are tests)",
    )
    projects: dict[Name, dict[StageName, StageEntry] | Literal[False]] | None = Field(
        None, description="Per project (its name in pyproject.toml): stage keys merged over those"
    )


class ProjectDoc(_Strict):
    """The repository's name, version and target Python(s)."""

    name: Name = Field(description="The repository's name: release tags, SBOMs and reports")
    version: ProjectVersion = Field("git", description="PEP 440 literal, or 'git' for git describe")
    # One version or a list; held as a list (a string is a list of one).
    python: Annotated[list[PythonVersion], Field(min_length=1), WithJsonSchema(PYTHON_SCHEMA)] = (
        Field(default_factory=lambda: ["3.11"])
    )

    versioning: Literal["lockstep", "per-binary"] | None = Field(
        None,
        description="with version: git, 'per-binary' (each binary's version follows its own "
        "inputs) or 'lockstep' (one version for all, the newest); default: lockstep when "
        "projects of the repository pin each other exactly (==), else per-binary",
        examples=["per-binary"],
    )

    tag_prefix: Annotated[str, Field(pattern=r"^[^\s*?\[\\~^:]*$")] = Field(
        "",
        description="with version: git, what the version tags start with, stripped before "
        "the version (GoReleaser's monorepo tag_prefix): 'python-v' reads python-v0.5.3; "
        "'{project}/v' reads each binary's version from its own project's tags "
        "(acme-cli/v1.2.3). Default: a tag's version after any such prefix",
        examples=["{project}/v"],
    )

    @field_validator("python", mode="before")
    @classmethod
    def _one_or_list(cls, value: object) -> object:
        # "3.11" means ["3.11"]; an unquoted 3.11 (a float) is reported as a string
        # that should have been quoted, as for any other string key.
        if isinstance(value, str):
            return [value]
        if isinstance(value, list):
            return value
        raise PydanticCustomError("string_type", "Input should be a valid string")


class ManifestDoc(_Strict):
    """binaries.yaml: what a repository ships and how."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        title="shipyard binaries.yaml",
        populate_by_name=True,
    )

    schema_: Literal[1] = Field(alias="schema", description="Manifest format version")

    @field_validator("schema_", mode="before")
    @classmethod
    def _not_a_bool(cls, value: object) -> object:
        # YAML's `true` is Python's True, which equals 1: not a format version.
        if isinstance(value, bool):
            raise ValueError("the format version is the number 1, not a boolean")
        return value

    project: ProjectDoc
    defaults: DefaultsDoc = DefaultsDoc()
    groups: dict[Name, list[Name]] = Field(
        default_factory=dict,
        description="Named selections of binaries (or other groups)",
        examples=[{"standard": ["meshctl", "echo"]}],
    )
    binaries: dict[Name, BinaryDoc] = Field(
        min_length=1, description="The programs the repository ships, by name"
    )
    tests: TestsDoc | None = None
