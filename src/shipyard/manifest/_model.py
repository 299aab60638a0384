"""The manifest's shape as pydantic models: one source for validation and the JSON Schema."""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias

from packaging.version import InvalidVersion, Version
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    field_validator,
)
from pydantic_core import PydanticCustomError

from shipyard.manifest._types import (
    HOST_OS,
    IMAGE_PLATFORMS,
    OUTPUT_KINDS,
    PLATFORMS,
    parse_duration,
    parse_size,
)
from shipyard.oci.basespec import parse_base
from shipyard.oci.remote.reference import COMPONENT, HOST, MAX_NAME, TAG

__all__ = [
    "HOST_OS",
    "OUTPUT_KINDS",
    "PLATFORMS",
    "PYTHON_PLACEHOLDER",
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

# Names become file names, image repositories and PEP 508 names, so they use the
# intersection of those grammars: lower case, digits, and . _ - inside.
Name = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$")]
EntryPoint = Annotated[
    str,
    StringConstraints(
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
    ),
]
# The output kinds, platforms and host OSes are defined once, in _types (the engine
# reads them there without pydantic); the model's Literal types are made from them.
if TYPE_CHECKING:  # a Literal of a runtime tuple is not a type to mypy: a str to it
    Output: TypeAlias = str
    LinuxPlatform: TypeAlias = str
    Platform: TypeAlias = str
    HostOS: TypeAlias = str
else:
    Output = Literal[OUTPUT_KINDS]
    # The platforms an image may have: Linux only.
    LinuxPlatform = Literal[IMAGE_PLATFORMS]
    # A binary's platforms: its zipapp may also be for macOS and Windows (its image
    # may not: see _binary_checks' check of the image's platforms).
    Platform = Literal[PLATFORMS]
    HostOS = Literal[HOST_OS]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]

# The checks below run after `${}` expansion, on what the tools will be given; as
# validators rather than patterns they stay out of the JSON Schema, which sees the
# text before expansion. Values reach file names, image configs, registry URLs and
# argument vectors (never a shell), so each is held to the grammar of where it goes.

# Control characters, and line breaks a single-line value must not hold.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_BREAK = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _one_line(value: str) -> str:
    if _BREAK.search(value):
        raise ValueError("write it on one line, without control characters")
    return value


def _no_controls(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError("remove the control characters")
    return value


Line = Annotated[str, AfterValidator(_one_line)]
Text = Annotated[str, AfterValidator(_no_controls)]

# Hubs and tags follow the OCI distribution grammar, defined once in
# shipyard.oci.remote.reference (pure patterns: no HTTP stack, no credentials), which
# checks each reference again before any request. image.base is parsed by
# shipyard.oci.basespec.
# The image config's User: a name or id, optionally with a group name or id.
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,63})?")


def _tag(value: str) -> str:
    if not TAG.fullmatch(value):
        raise ValueError(
            "an image tag is 1-128 letters, digits, '_', '.' or '-', not starting with '.' or '-'"
        )
    return value


def _registry(value: str) -> tuple[str, str]:
    """Check `host[:port][/path]`; return the host and the path."""
    if "://" in value:
        raise ValueError("leave out the scheme: write host[:port]/path, e.g. ghcr.io/acme")
    host, _, path = value.partition("/")
    if not HOST.fullmatch(host) or not ("." in host or ":" in host or host == "localhost"):
        raise ValueError("start with a registry host[:port], e.g. 127.0.0.1:5000/mesh")
    port = host.rpartition(":")[2] if not host.endswith("]") and ":" in host else ""
    if port and not 0 < int(port) < 65536:
        raise ValueError("a port is 1-65535")
    return host, path


def _repository(path: str) -> None:
    if len(path) > MAX_NAME:
        raise ValueError(f"a repository path is at most {MAX_NAME} characters")
    if not all(COMPONENT.fullmatch(part) for part in path.split("/")):
        raise ValueError(
            "a repository path is lower-case letters and digits, separated by "
            "'.', '_', '__' or '-', in parts joined by '/'"
        )


def _hub(value: str) -> str:
    _, path = _registry(value)
    if path or value.endswith("/"):
        _repository(path)
    return value


# `${python}` in image.base (and a variant's base) stands for each target Python; the
# expansion of environment variables leaves it alone (see _expand.py).
PYTHON_PLACEHOLDER = "${python}"


def _base(value: str) -> str:
    # The one parser of image.base, which the action key and the loader use too;
    # its InvalidBase is a ValueError, so pydantic reports it as this key's problem.
    # `${python}` becomes a version (all versions have the same shape) to be parsed.
    parse_base(value.replace(PYTHON_PLACEHOLDER, "3.11"))
    return value


def _user(value: str) -> str:
    if not _USER.fullmatch(value):
        raise ValueError("write a user or uid, optionally :group or :gid, e.g. 65532 or app:app")
    return value


def _version(value: str) -> str:
    if value != "git":
        try:
            Version(value)
        except InvalidVersion:
            raise ValueError("write a PEP 440 version such as 1.4.0, or git") from None
    return value


def _size(value: str) -> str:
    parse_size(value)  # its ValueError names the fix
    return value


def _command(value: str) -> str:
    _one_line(value)
    try:
        words = shlex.split(value)
    except ValueError as exc:  # an unclosed quote
        raise ValueError(
            f"{exc}: close the quote (the command is split as a shell would)"
        ) from None
    if not words:
        raise ValueError("write a command, e.g. python -m pytest")
    return value


def _duration(value: str | int) -> str | int:
    parse_duration(value)  # its ValueError names the fix
    return value


Tag = Annotated[str, AfterValidator(_tag)]
Command = Annotated[str, AfterValidator(_command)]
Duration = Annotated[
    str | int,
    AfterValidator(_duration),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(s|m|h)$"},
                {"type": "integer", "minimum": 1},
            ],
            "description": "seconds, or a number with s, m or h: 90, 90s, 10m, 1h",
        }
    ),
]
Size = Annotated[str, AfterValidator(_size)]
Hub = Annotated[str, AfterValidator(_hub)]
BaseImage = Annotated[str, AfterValidator(_base)]
User = Annotated[str, AfterValidator(_user)]


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
    workdir: Line | None = Field(None, description="Working directory in the image")
    env: dict[EnvName, Text] | None = Field(None, description="Environment of the entrypoint")
    labels: dict[Line, Text] | None = Field(None, description="Image config labels")
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
        None, description="Hubs (of `hubs`) pushed to only in CI or with --force-protected"
    )
    movable_tags: list[Tag] | None = Field(
        None, description="Tags a release may move from another digest (default [latest])"
    )
    allow_missing_libraries: list[Annotated[str, Field(pattern=r"^(\*|[^\s/]+)$")]] | None = Field(
        None,
        description="Shared libraries (file names, e.g. libcuda.so.1; '*' for all) the "
        "image's native code may need without the base or the image having them "
        "(default: none; a missing one fails the build)",
    )


class ZipappDoc(_Strict):
    """How a binary's zipapp is made."""

    shebang: Line | None = Field(
        None, description="Interpreter line (default /usr/bin/env python3)"
    )
    compress: bool | None = Field(None, description="Deflate entries (default true)")
    compile: bool | None = Field(
        None, description="Ship .pyc files; shipyard must run the target Python (default false)"
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

    outputs: list[Output] | None = Field(default=None, min_length=1)
    platforms: list[Platform] | None = Field(default=None, min_length=1)
    host: list[HostOS] | None = Field(default=None, min_length=1)
    image: ImageDoc | None = None
    zipapp: ZipappDoc | None = None
    smoke: list[Text] | None = None
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
    )
    host: list[HostOS] | None = Field(None, min_length=1, description="Host OSes that may build it")
    image: ImageDoc | None = None
    zipapp: ZipappDoc | None = None
    requirements: Line | None = Field(
        None, description="Hash-pinned lock file (uv pip compile --generate-hashes) to install"
    )
    smoke: list[Text] | None = Field(None, description="Arguments of a smoke run, e.g. [--version]")
    extras: list[Name] | None = Field(
        None, description="Extras of the binary's project installed into its zipapp and image"
    )
    size: SizeDoc | None = None


StageName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]{0,30}$")]
GroupName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")]


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
    )
    timeout: Duration | None = Field(None, description="How long it may take to be ready (30s)")
    env: dict[EnvName, Text] | None = Field(None, description="Environment of the service")


class StageDoc(_Strict):
    """One test stage: a command run in the project's folder, in an environment made
    from the lock (the project, its in-repo libraries and `groups`)."""

    command: Command | None = Field(
        None, description="Split as a shell would, run without one, e.g. python -m pytest"
    )
    groups: list[GroupName] | None = Field(
        None, description="Dependency groups to install (default: uv's default groups, dev)"
    )
    env: dict[EnvName, Text] | None = Field(None, description="Environment of the command")
    requirements: list[Line] | None = Field(
        None,
        description="Requirements files, relative to the project's folder, installed into "
        "the stage's environment after the lock's packages (tox's deps = -r FILE); read "
        "from the workspace root, as tox reads them",
    )
    timeout: Duration | None = Field(None, description="Longest the stage may run (30m)")
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


PYTHON_PATTERN = r"^3\.[0-9]{1,2}$"
PythonVersion = Annotated[str, StringConstraints(pattern=PYTHON_PATTERN)]
_PYTHON_SCHEMA = {
    "anyOf": [
        {"type": "string", "pattern": PYTHON_PATTERN},
        {
            "type": "array",
            "items": {"type": "string", "pattern": PYTHON_PATTERN},
            "minItems": 1,
            "uniqueItems": True,
        },
    ],
    "default": "3.11",
    "description": 'Target interpreter(s), major.minor: one ("3.11") or a list '
    '(["3.11", "3.12"]; the first is the default image\'s)',
    "title": "Python",
}


class ProjectDoc(_Strict):
    """The repository's name, version and target Python(s)."""

    name: Name
    version: Annotated[str, AfterValidator(_version)] = Field(
        "git", description="PEP 440 literal, or 'git' for git describe"
    )
    # One version or a list; held as a list (a string is a list of one).
    python: Annotated[list[PythonVersion], Field(min_length=1), WithJsonSchema(_PYTHON_SCHEMA)] = (
        Field(default_factory=lambda: ["3.11"])
    )

    versioning: Literal["lockstep", "per-binary"] | None = Field(
        None,
        description="with version: git, 'per-binary' (each binary's version follows its own "
        "inputs) or 'lockstep' (one version for all, the newest); default: lockstep when "
        "projects of the repository pin each other exactly (==), else per-binary",
    )

    tag_prefix: Annotated[str, Field(pattern=r"^[^\s*?\[\\~^:]*$")] = Field(
        "",
        description="with version: git, what the version tags start with, stripped before "
        "the version (GoReleaser's monorepo tag_prefix): 'python-v' reads python-v0.5.3; "
        "'{project}/v' reads each binary's version from its own project's tags "
        "(acme-cli/v1.2.3). Default: a tag's version after any such prefix",
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
        default_factory=dict, description="Named selections of binaries (or other groups)"
    )
    binaries: dict[Name, BinaryDoc] = Field(min_length=1)
    tests: TestsDoc | None = None
