"""The staged release: dist/release/<version>/ and its release.json, as typed values.

This module alone knows the staged folder's names (`release.json`, `SHA256SUMS`,
its signature, the provenance, the journal, and where each kind of artifact
goes) and the shape of release.json. Staging builds a `StagedRelease` and
writes it here; publish, promote, verify, provenance and preflight read it
through `parse_release`, which turns any JSON into typed values or a
`StagedError` naming the field: no `dict[str, Any]` leaves this module.

As GoReleaser's checksum and sign pipes add their files to its one list of
artifacts, the sums, their signature and the provenance are artifacts of the
same list (`CHECKSUMS`, `SIGNATURE`, `PROVENANCE` kinds), added after
release.json is written: they cover it, so it cannot list them, and they are
found by their fixed names. Variant and platform are fields; nothing is parsed
from a path.

It imports nothing of the build engine or the builders, so promote and verify,
which build nothing, can read a release.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Literal

from shipyard._fs import sha256_file
from shipyard.errors import UsageError

__all__ = [
    "CHECKSUMS",
    "COVERING",
    "JOURNAL",
    "PROVENANCE",
    "PROVENANCE_FILE",
    "RELEASE_JSON",
    "SIGNATURE",
    "SUMS",
    "SUMS_SIG",
    "UNSUMMED",
    "Artifact",
    "FileKind",
    "ImageSbom",
    "PlatformEntry",
    "StagedError",
    "StagedFile",
    "StagedImage",
    "StagedRelease",
    "covering",
    "inside",
    "loads",
    "parse_release",
    "path_problem",
    "staged_path",
]

RELEASE_JSON = "release.json"
SUMS = "SHA256SUMS"
SUMS_SIG = "SHA256SUMS.sig"
PROVENANCE_FILE = "provenance.intoto.jsonl"
JOURNAL = "publish.journal"  # publish's own state: never summed, never signed
# The sums, their signature (of the sums) and the journal are not in SHA256SUMS.
UNSUMMED = frozenset({SUMS, SUMS_SIG, JOURNAL})

FileKind = Literal["wheel", "zipapp", "archive", "sbom", "checksums", "signature", "provenance"]
_LISTED: tuple[FileKind, ...] = ("wheel", "zipapp", "archive", "sbom")
CHECKSUMS: FileKind = "checksums"
SIGNATURE: FileKind = "signature"
PROVENANCE: FileKind = "provenance"
# Added after release.json is written, covering it: never listed in it.
COVERING: dict[FileKind, str] = {
    PROVENANCE: PROVENANCE_FILE,
    CHECKSUMS: SUMS,
    SIGNATURE: SUMS_SIG,
}

_FOLDERS = {
    "wheel": "wheels",
    "zipapp": "zipapps",
    "archive": "archives",
    "image": "images",
    "sbom": "sbom",
}


def staged_path(kind: str, name: str) -> str:
    """Where an artifact of `kind` goes in a staged release folder, relative to it:
    `wheels/<file>`, `zipapps/<file>`, `archives/<file>`, `images/<binary>`,
    `sbom/<name>.cdx.json` (a binary, a zipapp or an image platform: see release.sbom)."""
    suffix = ".cdx.json" if kind == "sbom" else ""
    return f"{_FOLDERS[kind]}/{name}{suffix}"


def path_problem(name: str) -> str | None:
    """What makes `name` no plain relative path inside a release folder (absolute, a
    backslash or NUL, an empty, `.` or `..` part); None when it is one."""
    if not name:
        return "an empty name"
    if name.startswith("/") or "\\" in name or "\0" in name:
        return f"the name {name!r}, which is not a relative path"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return f"the name {name!r}, which is not a plain relative path"
    return None


def inside(folder: Path, rel: str) -> Path:
    """`folder/rel` for a path release.json names; StagedError unless it stays inside
    (`path_problem`), before anything is read there."""
    if path_problem(rel) is not None:
        raise StagedError(
            f"{folder / RELEASE_JSON} names the path {rel!r}, outside {folder}; "
            "pass --clean to stage the release again"
        )
    return folder.joinpath(*rel.split("/"))


class StagedError(UsageError):
    """release.json is not what staging writes: the field and what is wrong with it
    (exit 2: stage the release again)."""


@dataclass(frozen=True)
class StagedFile:
    """A file of the staged release, by path relative to the folder and its sha256.

    `binary` is None for a wheel (a library's wheel ships for every binary that
    needs it); `of` and `image` say what an SBOM describes (the zipapp's path, or
    the platform manifest's digest and the image's index digest).
    """

    kind: FileKind
    path: str
    sha256: str
    size: int
    platform: str = "any"
    binary: str | None = None
    of: str | None = None
    image: str | None = None
    variant: str = ""

    @classmethod
    def read(cls, folder: Path, rel: str, kind: FileKind, **fields: str | None) -> StagedFile:
        """The file `folder/rel` as an artifact of `kind`: its sha256 and size read now."""
        path = folder / rel
        return cls(kind, rel, sha256_file(path), path.stat().st_size, **fields)  # type: ignore[arg-type]

    @property
    def name(self) -> str:
        """The file's own name (a wheel's file name, say)."""
        return PurePosixPath(self.path).name

    def to_json(self) -> dict[str, object]:
        """The release.json entry, keys in the order staging has always written them."""
        out: dict[str, object] = {"kind": self.kind}
        if self.binary is not None:
            out["binary"] = self.binary
        out["platform"] = self.platform
        if self.of is not None:
            out["of"] = self.of
        if self.image is not None:
            out["image"] = self.image
        if self.variant:
            out["variant"] = self.variant
        return out | {"path": self.path, "sha256": self.sha256, "size": self.size}


@dataclass(frozen=True)
class PlatformEntry:
    """One platform manifest of a staged image."""

    platform: str
    digest: str
    size: int


@dataclass(frozen=True)
class ImageSbom:
    """An SBOM attachment of an image (`sha256-<hex>.sbom`): the manifest publish pushes
    next to it, from the staged `documents` in layer order. The index's has one
    document per platform; a platform's (`platform`, `of` its manifest digest) one."""

    tag: str
    digest: str
    documents: tuple[str, ...]
    references: tuple[str, ...]
    platform: str = ""
    of: str = ""

    def to_json(self) -> dict[str, object]:
        """The entry as release.json holds it."""
        head: dict[str, object] = {"platform": self.platform, "of": self.of} if self.of else {}
        return head | {
            "tag": self.tag,
            "digest": self.digest,
            "documents": list(self.documents),
            "references": list(self.references),
        }


@dataclass(frozen=True)
class StagedImage:
    """An image of the staged release: its OCI layout folder, where it goes, its SBOMs.

    A variant (`variant`, tags suffixed `-<variant>`) is one more image;
    `collapsed` when it is the default image itself (the same digest).
    """

    binary: str
    path: str  # the OCI layout folder
    digest: str  # of the index (or the single manifest)
    media_type: str
    size: int
    platforms: tuple[str, ...]
    manifests: tuple[PlatformEntry, ...]
    hubs: tuple[str, ...]
    tags: tuple[str, ...]  # the version tag first
    variant: str = ""
    collapsed: bool = False
    sbom: ImageSbom | None = None  # the index's attachment
    platform_sboms: tuple[ImageSbom, ...] = ()  # each platform's
    kind: Literal["image"] = field(default="image", init=False)

    @property
    def sboms(self) -> tuple[ImageSbom, ...]:
        """Every SBOM attachment: the index's, then each platform's."""
        return (self.sbom, *self.platform_sboms) if self.sbom else ()

    def to_json(self) -> dict[str, object]:
        """The release.json entry, keys in the order staging has always written them."""
        out: dict[str, object] = {
            "kind": "image",
            "binary": self.binary,
            "path": self.path,
            "digest": self.digest,
            "media_type": self.media_type,
            "size": self.size,
            "platform": list(self.platforms),
            "manifests": [
                {"platform": m.platform, "digest": m.digest, "size": m.size} for m in self.manifests
            ],
            "hubs": list(self.hubs),
            "tags": list(self.tags),
        }
        if self.variant:
            out |= {"variant": self.variant, "collapsed": self.collapsed}
        if self.sbom is not None:
            out["sbom"] = self.sbom.to_json() | {
                "platforms": [s.to_json() for s in self.platform_sboms]
            }
        return out


Artifact = StagedFile | StagedImage


@dataclass(frozen=True)
class StagedRelease:
    """release.json: what was staged, of which version and commit, in one typed list."""

    project: str
    version: str
    tag: str | None
    revision: str | None
    snapshot: bool
    build: Mapping[str, object]  # the build identity every output carries
    artifacts: tuple[Artifact, ...]
    schema: int = 1

    def files(self, kind: FileKind | None = None) -> tuple[StagedFile, ...]:
        """The files (of `kind`), in release.json's order."""
        return tuple(
            a for a in self.artifacts if isinstance(a, StagedFile) and kind in (None, a.kind)
        )

    @property
    def images(self) -> tuple[StagedImage, ...]:
        """The images and image variants, in release.json's order."""
        return tuple(a for a in self.artifacts if isinstance(a, StagedImage))

    @property
    def wheels(self) -> tuple[StagedFile, ...]:
        """The wheels."""
        return self.files("wheel")

    def listed(self) -> tuple[Artifact, ...]:
        """What release.json lists: all but the files that cover it."""
        return tuple(a for a in self.artifacts if a.kind not in COVERING)

    def with_files(self, *files: StagedFile) -> StagedRelease:
        """The release with `files` appended (the sums, the signature, the provenance)."""
        return replace(self, artifacts=(*self.artifacts, *files))

    def tag_order(self) -> list[tuple[StagedImage, str]]:
        """(image, tag) in the order tags move: each image's version tag, then the rest."""
        images = self.images
        most = max((len(i.tags) for i in images), default=0)
        return [(i, i.tags[rank]) for rank in range(most) for i in images if rank < len(i.tags)]

    def to_json(self) -> dict[str, object]:
        """release.json's document."""
        return {
            "schema": self.schema,
            "project": self.project,
            "version": self.version,
            "tag": self.tag,
            "revision": self.revision,
            "snapshot": self.snapshot,
            "build": dict(self.build),
            "artifacts": [a.to_json() for a in self.listed()],
        }

    def dumps(self) -> bytes:
        """release.json's bytes, as staging writes them."""
        return (json.dumps(self.to_json(), indent=2) + "\n").encode()


# -- reading: any JSON to typed values, or a StagedError naming the field -------------


class _Reader:
    """Typed access to one JSON object of release.json, naming the field on error."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise StagedError(f"{where} is not an object")
        self.data: dict[object, object] = data
        self.where = where

    def _bad(self, key: str, what: str) -> StagedError:
        return StagedError(f"{self.where} has {key} {self.data.get(key)!r}, not {what}")

    def text(self, key: str) -> str:
        value = self.data.get(key)
        if not isinstance(value, str):
            raise self._bad(key, "a string")
        return value

    def optional_text(self, key: str, default: str | None = None) -> str | None:
        value = self.data.get(key, default)
        if value is not None and not isinstance(value, str):
            raise self._bad(key, "a string")
        return value

    def number(self, key: str) -> int:
        value = self.data.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise self._bad(key, "a size")
        return value

    def flag(self, key: str) -> bool:
        value = self.data.get(key, False)
        if not isinstance(value, bool):
            raise self._bad(key, "true or false")
        return value

    def texts(self, key: str) -> tuple[str, ...]:
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._bad(key, "a list of strings")
        return tuple(value)

    def items(self, key: str) -> Iterator[_Reader]:
        value = self.data.get(key, [])
        if not isinstance(value, list):
            raise self._bad(key, "a list")
        for number, item in enumerate(value):
            yield _Reader(item, f"{self.where} {key}[{number}]")

    def child(self, key: str) -> _Reader | None:
        value = self.data.get(key)
        return None if value is None else _Reader(value, f"{self.where} {key}")


def _path(entry: _Reader) -> str:
    """The path relative to the folder; whether it stays inside is the verification's
    check (`verification.check_release`), which every reader runs first."""
    return entry.text("path")


def _sbom(entry: _Reader) -> ImageSbom:
    return ImageSbom(
        tag=entry.text("tag"),
        digest=entry.text("digest"),
        documents=entry.texts("documents"),
        references=entry.texts("references"),
        platform=entry.optional_text("platform") or "",
        of=entry.optional_text("of") or "",
    )


def _image(entry: _Reader) -> StagedImage:
    tags = entry.texts("tags")
    if not tags:
        raise StagedError(f"{entry.where} (the image of {entry.data.get('binary')}) has no tags")
    sbom = entry.child("sbom")
    return StagedImage(
        binary=entry.text("binary"),
        path=_path(entry) if "path" in entry.data else "",
        digest=entry.text("digest"),
        media_type=entry.optional_text("media_type") or "",
        size=entry.number("size") if "size" in entry.data else 0,
        platforms=entry.texts("platform"),
        manifests=tuple(
            PlatformEntry(
                m.optional_text("platform") or "",
                m.text("digest"),
                m.number("size") if "size" in m.data else 0,
            )
            for m in entry.items("manifests")
        ),
        hubs=entry.texts("hubs"),
        tags=tags,
        variant=entry.optional_text("variant") or "",
        collapsed=entry.flag("collapsed"),
        sbom=None if sbom is None else _sbom(sbom),
        platform_sboms=() if sbom is None else tuple(map(_sbom, sbom.items("platforms"))),
    )


def _file(entry: _Reader, kind: FileKind) -> StagedFile:
    return StagedFile(
        kind=kind,
        path=_path(entry),
        sha256=entry.optional_text("sha256") or "",
        size=entry.number("size") if "size" in entry.data else 0,
        platform=entry.optional_text("platform") or "any",
        binary=entry.optional_text("binary"),
        of=entry.optional_text("of"),
        image=entry.optional_text("image"),
        variant=entry.optional_text("variant") or "",
    )


def _artifact(entry: _Reader) -> Artifact:
    kind = entry.data.get("kind")
    if kind == "image":
        return _image(entry)
    for known in _LISTED:
        if kind == known:
            return _file(entry, known)
    raise StagedError(f"{entry.where} has the kind {kind!r}, which staging never writes")


def parse_release(data: object, where: str = RELEASE_JSON) -> StagedRelease:
    """release.json's parsed JSON as a StagedRelease; StagedError naming the first field
    that is not what staging writes (`where` names the file in the message)."""
    top = _Reader(data, where)
    build = top.data.get("build", {})
    if not isinstance(build, dict):
        raise StagedError(f"{where} has a build that is not an object")
    artifacts = top.data.get("artifacts")
    if not isinstance(artifacts, list):
        raise StagedError(f"{where} has no list of artifacts")
    return StagedRelease(
        project=top.optional_text("project") or "",
        version=top.optional_text("version") or "",
        tag=top.optional_text("tag"),
        revision=top.optional_text("revision"),
        snapshot=top.flag("snapshot"),
        build={str(k): v for k, v in build.items()},
        artifacts=tuple(_artifact(a) for a in top.items("artifacts")),
        schema=top.number("schema") if "schema" in top.data else 1,
    )


def loads(data: bytes, where: str = RELEASE_JSON) -> StagedRelease:
    """release.json's bytes as a StagedRelease; StagedError when not JSON or not its shape."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        raise StagedError(f"{where} is not JSON") from None
    return parse_release(document, where)


def covering(folder: Path) -> tuple[StagedFile, ...]:
    """The covering files the staged `folder` holds (the provenance, the sums, their
    signature), as artifacts of the same list."""
    return tuple(
        StagedFile(kind, rel, sha256_file(folder / rel), (folder / rel).stat().st_size)
        for kind, rel in COVERING.items()
        if (folder / rel).is_file()
    )
