"""The manifest's shape as pydantic models: one source for validation and the JSON Schema."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from shipyard.manifest._types import HOST_OS, OUTPUT_KINDS, PLATFORMS

__all__ = [
    "HOST_OS",
    "OUTPUT_KINDS",
    "PLATFORMS",
    "BinaryDoc",
    "DefaultsDoc",
    "ImageDoc",
    "ManifestDoc",
    "ProjectDoc",
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
Output = Literal["wheel", "zipapp", "image"]
Platform = Literal[
    "linux/amd64",
    "linux/arm64",
    "linux/arm/v7",
    "linux/386",
    "linux/ppc64le",
    "linux/s390x",
    "linux/riscv64",
]
HostOS = Literal["linux", "darwin", "windows"]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ImageDoc(_Strict):
    """How a binary's OCI image is made and where it is pushed."""

    base: str | None = Field(None, description="Base image: registry reference or oci-layout:PATH")
    hubs: list[str] | None = Field(None, description="Registries/repositories to push to")
    tags: list[str] | None = Field(None, description="Tags to push; ${VERSION} available")
    user: str | None = Field(None, description="User the entrypoint runs as")
    workdir: str | None = Field(None, description="Working directory in the image")
    env: dict[EnvName, str] | None = Field(None, description="Environment of the entrypoint")
    labels: dict[str, str] | None = Field(None, description="Image config labels")
    dockerfile: str | None = Field(
        None, description="Build with the Docker engine from this Dockerfile instead"
    )


class ZipappDoc(_Strict):
    """How a binary's zipapp is made."""

    shebang: str | None = Field(None, description="Interpreter line (default /usr/bin/env python3)")
    compress: bool | None = Field(None, description="Deflate entries (default true)")
    compile: bool | None = Field(
        None, description="Ship .pyc files; shipyard must run the target Python (default false)"
    )


class DefaultsDoc(_Strict):
    """Keys merged under every binary; a binary's own keys win."""

    outputs: list[Output] | None = Field(default=None, min_length=1)
    platforms: list[Platform] | None = Field(default=None, min_length=1)
    host: list[HostOS] | None = Field(default=None, min_length=1)
    image: ImageDoc | None = None
    zipapp: ZipappDoc | None = None
    smoke: list[str] | None = None


class BinaryDoc(_Strict):
    """One program the repository ships."""

    source: str = Field(description="Directory with the pyproject.toml that builds it")
    entrypoint: EntryPoint = Field(description="module:function that runs the program")
    outputs: list[Output] | None = Field(
        default=None, min_length=1, description="What to build (default: wheel)"
    )
    platforms: list[Platform] | None = Field(
        default=None, min_length=1, description="OCI platforms for zipapps/images"
    )
    host: list[HostOS] | None = Field(None, min_length=1, description="Host OSes that may build it")
    image: ImageDoc | None = None
    zipapp: ZipappDoc | None = None
    requirements: str | None = Field(
        None, description="Hash-pinned lock file (uv pip compile --generate-hashes) to install"
    )
    smoke: list[str] | None = Field(None, description="Arguments of a smoke run, e.g. [--version]")


class ProjectDoc(_Strict):
    """The repository's name, version and target Python."""

    name: Name
    version: str = Field("git", description="PEP 440 literal, or 'git' for git describe")
    python: Annotated[str, StringConstraints(pattern=r"^3\.[0-9]{1,2}$")] = Field(
        "3.11", description="Target interpreter (major.minor) for zipapps and images"
    )


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
