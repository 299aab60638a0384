"""Typed artifacts: what builders produce and push and release read.

An artifact is one file an action wrote, with what its builder knows about it:
its kind, the binary it belongs to, its platform and its metadata (the
distributions installed into it, an image's index digest and per-platform
manifests). Push and release select artifacts with the filters below, as
GoReleaser's artifact list does, and never work backwards from file names.

Kinds:

- ``wheel``: a source's wheel; `binary` is "" (a wheel belongs to a source and
  may serve several binaries), `platform` its sorted wheel tags
  (``py3-none-any``), `metadata.wheel` its own name and version.
- ``zipapp``: a ``.pyz``; `platform` is ``any`` for a universal one, else an
  OCI platform; `metadata.installed` the distributions in it.
- ``image``: an image's OCI layout, named by its ``index.json``; `platform` is
  ``any`` (the index holds every platform), `metadata.image` the index digest
  and the per-platform manifests, `metadata.installed` what each platform got.
- ``image-layout``: every other file of that layout (``oci-layout``, blobs).
- ``image-archive``: a ``docker load`` tarball of one platform.
- ``test``: a passing test stage's JUnit XML; `binary` is its project, `platform`
  ``any``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ANY",
    "KINDS",
    "Artifact",
    "Distribution",
    "ImageIndex",
    "Installed",
    "Metadata",
    "PlatformManifest",
    "select",
]

KINDS = ("wheel", "zipapp", "image", "image-layout", "image-archive", "test")
ANY = "any"  # the platform of an artifact that runs on every platform of its action


@dataclass(frozen=True)
class Distribution:
    """A distribution by name and version.

    What an installer put into an artifact may say more: `sha256`, the wheel file it
    was installed from (None when no wheel file was known), `license`, what its
    METADATA declares (License-Expression, else License, else the license
    classifiers joined with "; "), and `first_party`: one of the repository's own
    wheels (the binary's or an in-repo library), installed from the file built here.
    """

    name: str
    version: str
    sha256: str | None = None
    license: str | None = None
    first_party: bool = False

    def to_json(self) -> list[Any]:
        """`[name, version]`, with an object of the optional facts third when any is set."""
        extra: dict[str, Any] = {}
        if self.sha256 is not None:
            extra["sha256"] = self.sha256
        if self.license is not None:
            extra["license"] = self.license
        if self.first_party:
            extra["first_party"] = True
        return [self.name, self.version, extra] if extra else [self.name, self.version]


@dataclass(frozen=True)
class Installed:
    """The distributions a builder installed for one platform."""

    platform: str
    distributions: tuple[Distribution, ...]


@dataclass(frozen=True)
class PlatformManifest:
    """One platform's manifest in an image index."""

    platform: str
    digest: str
    size: int


@dataclass(frozen=True)
class ImageIndex:
    """An image's root (index or single manifest) and its platform manifests."""

    digest: str
    media_type: str
    size: int
    manifests: tuple[PlatformManifest, ...]

    @property
    def platforms(self) -> tuple[str, ...]:
        """The platforms of the manifests, in index order."""
        return tuple(m.platform for m in self.manifests)


@dataclass(frozen=True)
class Metadata:
    """What a builder knows of an artifact beyond its bytes.

    `installed` is None when the builder does not know what went in (an image
    built by the Docker engine from a Dockerfile).
    """

    installed: tuple[Installed, ...] | None = None
    image: ImageIndex | None = None
    wheel: Distribution | None = None

    def distributions(self) -> tuple[Distribution, ...]:
        """Every distribution installed for any platform, deduplicated, sorted."""
        found = {d for i in self.installed or () for d in i.distributions}
        return tuple(sorted(found, key=lambda d: (d.name.lower(), d.version)))

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready view; fields that are unset are left out."""
        out: dict[str, Any] = {}
        if self.installed is not None:
            out["installed"] = [
                {
                    "platform": i.platform,
                    "distributions": [d.to_json() for d in i.distributions],
                }
                for i in self.installed
            ]
        if self.image is not None:
            out["image"] = {
                "digest": self.image.digest,
                "media_type": self.image.media_type,
                "size": self.image.size,
                "manifests": [
                    {"platform": m.platform, "digest": m.digest, "size": m.size}
                    for m in self.image.manifests
                ],
            }
        if self.wheel is not None:
            out["wheel"] = [self.wheel.name, self.wheel.version]
        return out

    @classmethod
    def from_json(cls, data: object) -> Metadata:
        """Parse `to_json`'s output; ValueError on anything of another shape."""
        data = _mapping(data, "metadata")
        installed = None
        if "installed" in data:
            installed = tuple(
                Installed(
                    _text(_mapping(i, "installed").get("platform"), "platform"),
                    tuple(
                        _distribution(d) for d in _list(_mapping(i, "").get("distributions"), "")
                    ),
                )
                for i in _list(data["installed"], "installed")
            )
        image = None
        if "image" in data:
            raw = _mapping(data["image"], "image")
            image = ImageIndex(
                _text(raw.get("digest"), "digest"),
                _text(raw.get("media_type"), "media_type"),
                _count(raw.get("size"), "size"),
                tuple(
                    PlatformManifest(
                        _text(_mapping(m, "manifest").get("platform"), "platform"),
                        _text(_mapping(m, "manifest").get("digest"), "digest"),
                        _count(_mapping(m, "manifest").get("size"), "size"),
                    )
                    for m in _list(raw.get("manifests"), "manifests")
                ),
            )
        wheel = _distribution(data["wheel"]) if "wheel" in data else None
        return cls(installed, image, wheel)


@dataclass(frozen=True)
class Artifact:
    """One file an action produced, with what its builder knows about it."""

    kind: str
    binary: str
    platform: str
    path: Path
    sha256: str
    size: int
    metadata: Metadata = field(default_factory=Metadata)

    def describe(self) -> dict[str, Any]:
        """kind, binary, platform and metadata as JSON (the path and bytes left out)."""
        return {
            "kind": self.kind,
            "binary": self.binary,
            "platform": self.platform,
            "metadata": self.metadata.to_json(),
        }

    def to_json(self, root: Path) -> dict[str, Any]:
        """The artifact as report.json lists it: path relative to `root` when inside it."""
        text, top = str(self.path), str(root).rstrip("/") + "/"
        # By strings: a no-op build reports every output, and pathlib's parsing shows.
        rel = text[len(top) :] if text.startswith(top) else text
        return {"path": rel, "sha256": self.sha256, "size": self.size, **self.describe()}

    @classmethod
    def described(cls, described: object, path: Path, sha256: str, size: int) -> Artifact:
        """An artifact from `describe`'s output and the file's facts; ValueError if malformed."""
        data = _mapping(described, "artifact")
        kind = _text(data.get("kind"), "kind")
        if kind not in KINDS:
            raise ValueError(f"artifact kind {kind!r} is not one of {', '.join(KINDS)}")
        return cls(
            kind,
            _text(data.get("binary"), "binary"),
            _text(data.get("platform"), "platform"),
            path,
            sha256,
            size,
            Metadata.from_json(data.get("metadata", {})),
        )

    @classmethod
    def from_json(cls, data: object, root: Path) -> Artifact:
        """Parse `to_json`'s output (paths relative to `root`); ValueError if malformed."""
        raw = _mapping(data, "artifact")
        path = Path(_text(raw.get("path"), "path"))
        return cls.described(
            raw, root / path, _text(raw.get("sha256"), "sha256"), _count(raw.get("size"), "size")
        )


def select(
    artifacts: Iterable[Artifact],
    *,
    kind: str | Collection[str] | None = None,
    binary: str | None = None,
    platform: str | None = None,
) -> tuple[Artifact, ...]:
    """The artifacts of `kind` (one or several), for `binary`, on `platform`, in order."""
    kinds = (kind,) if isinstance(kind, str) else kind
    return tuple(
        a
        for a in artifacts
        if (kinds is None or a.kind in kinds)
        and (binary is None or a.binary == binary)
        and (platform is None or a.platform == platform)
    )


def _mapping(value: object, what: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{what or 'a value'} is not an object")
    return value


def _list(value: object, what: str) -> list[object]:
    if not isinstance(value, list):
        raise ValueError(f"{what or 'a value'} is not a list")
    return value


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} is not a string")
    return value


def _count(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{what} is not a byte count")
    return value


def _distribution(value: object) -> Distribution:
    pair = _list(value, "distribution")
    if len(pair) not in (2, 3):
        raise ValueError("a distribution is not [name, version] or [name, version, {...}]")
    extra = _mapping(pair[2], "distribution facts") if len(pair) == 3 else {}
    sha256, license_ = extra.get("sha256"), extra.get("license")
    first = extra.get("first_party", False)
    if not isinstance(first, bool):
        raise ValueError("first_party is not true or false")
    return Distribution(
        _text(pair[0], "name"),
        _text(pair[1], "version"),
        None if sha256 is None else _text(sha256, "sha256"),
        None if license_ is None else _text(license_, "license"),
        first,
    )
