"""`image.base` parsed once: the sources a base image comes from, as a typed value.

A base names one or more sources, separated by commas:

    oci-layout:PATH                     an OCI image layout (a multi-arch index is searched)
    docker-archive:PATH                 a tarball from `docker save`
    rootfs:PATH;PLATFORM                a root file system tar (gzip or plain) for one platform
    HOST[:PORT]/REPO[:TAG][@DIGEST]     a registry reference (the host is always written)

PATHs are relative to the repository root unless absolute. The manifest
validator (`shipyard check`), the action key (`oci.keys`) and the loader
(`oci.base`) all read this value, so what one accepts the others do too. This
module reads no files and imports no HTTP stack: the manifest imports it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from shipyard.errors import UsageError

if TYPE_CHECKING:
    from shipyard.oci.model import Platform
    from shipyard.oci.remote.reference import Reference

__all__ = ["FILE_KINDS", "BaseSource", "BaseSpec", "InvalidBase", "SourceKind", "parse_base"]

SourceKind = Literal["oci-layout", "docker-archive", "rootfs", "registry"]
FILE_KINDS: tuple[SourceKind, ...] = ("oci-layout", "docker-archive", "rootfs")
_BREAK = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_FORMS = "oci-layout:PATH, docker-archive:PATH, rootfs:PATH;PLATFORM or HOST[:PORT]/REPO[:TAG]"


class InvalidBase(UsageError, ValueError):
    """An `image.base` value that is not one of the documented forms (exit 2)."""


@dataclass(frozen=True)
class BaseSource:
    """One source of a base: a layout, an archive, a rootfs for one platform, or a reference."""

    kind: SourceKind
    path: str = ""  # file kinds: as written
    platform: Platform | None = None  # rootfs only
    reference: Reference | None = None  # registry only

    def __str__(self) -> str:
        if self.reference is not None:
            return str(self.reference)
        suffix = f";{self.platform}" if self.platform is not None else ""
        return f"{self.kind}:{self.path}{suffix}"

    def location(self, root: Path) -> Path:
        """The file or folder a file source names, against the repository `root`."""
        return root / self.path

    def content_file(self, root: Path) -> Path:
        """The one file whose bytes identify this source's content (a layout's index.json)."""
        path = self.location(root)
        return path / "index.json" if self.kind == "oci-layout" else path


@dataclass(frozen=True)
class BaseSpec:
    """The sources of one `image.base`, in order: each platform takes the first that has it."""

    sources: tuple[BaseSource, ...]

    def __str__(self) -> str:
        return ",".join(str(s) for s in self.sources)

    @classmethod
    def parse(cls, text: str) -> BaseSpec:
        """Parse `text` (see the module); raise InvalidBase naming the source and the fix."""
        return parse_base(text)


def _source(item: str) -> BaseSource:
    kind, colon, rest = item.partition(":")
    if colon and kind in FILE_KINDS:
        path, platform = rest, None
        if kind == "rootfs":
            path, semicolon, which = rest.rpartition(";")
            if not semicolon:
                raise InvalidBase(f"base image {item}: write rootfs:PATH;PLATFORM")
            # Only here: the OCI model is not needed to key a no-op build's other bases.
            from shipyard.oci.model import OCIError, Platform

            try:
                platform = Platform.parse(which.strip())
            except OCIError as exc:
                raise InvalidBase(f"base image {item}: {exc}") from None
        if not path.strip():
            raise InvalidBase(f"base image {item}: write {kind}:PATH with the path")
        return BaseSource(kind, path.strip(), platform)
    # Imported here: a no-op build of a file-based base never parses a registry name.
    from shipyard.oci.remote.reference import parse_reference

    try:
        return BaseSource("registry", reference=parse_reference(item))
    except UsageError as exc:
        raise InvalidBase(f"{exc} (a base is {_FORMS})") from None


def parse_base(text: str) -> BaseSpec:
    """Parse an `image.base` value into its sources; raise InvalidBase if any is not valid."""
    if _BREAK.search(text):
        raise InvalidBase("write the base image on one line, without control characters")
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise InvalidBase(f"the base image is empty; write {_FORMS}")
    if not all(items):
        raise InvalidBase(f"base image {text!r}: an empty source between commas; remove it")
    return BaseSpec(tuple(_source(item) for item in items))
