"""The SBOMs a release stages: what shipped, described per zipapp and per image platform.

One CycloneDX document per zipapp (`sbom/<zipapp name without .pyz>.cdx.json`)
and one per platform of each image and image variant
(`sbom/<binary>-<version>-image[-<variant>]-<os>_<arch>.cdx.json`), each listed in
release.json as a `sbom` file with `binary`, `platform` and `of` (the zipapp's
path, or the platform manifest's digest; `image` the index digest). An image
with SBOMs carries the attachments publish pushes next to it (`StagedImage.sbom`).
A binary none of whose artifacts has known contents (only a wheel, or a
Dockerfile image) keeps the binary-level `sbom/<binary>.cdx.json`, from what its
artifacts installed, else uv.lock, else a resolve of its wheel's requirements.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from packaging.utils import canonicalize_name

from shipyard._fs import atomic_write
from shipyard.artifacts import ANY, Artifact, Distribution, select
from shipyard.builders.image.variants import variant_of
from shipyard.manifest import Binary
from shipyard.oci.layout import blob_path
from shipyard.oci.model import OCIError
from shipyard.oci.remote.attach import attached_tag
from shipyard.oci.remote.push import parse_hub
from shipyard.release.attachments import attachment
from shipyard.release.context import ReleaseContext
from shipyard.release.sbom import (
    BaseImage,
    contents_sbom,
    installed_dependencies,
    resolve_requirements,
    sbom_json,
    wheel_requirements,
)
from shipyard.release.staged import ImageSbom, StagedFile, StagedImage, staged_path

__all__ = ["binary_sboms", "stage_sboms"]


_BASE_NAME = "org.opencontainers.image.base.name"
_BASE_DIGEST = "org.opencontainers.image.base.digest"


def _installed_for(art: Artifact, platform: str) -> tuple[Distribution, ...] | None:
    """What was installed for `platform` (`linux/arm64/v8` matches `linux/arm64`);
    every platform's, merged, for `any`; None if not known."""
    installed = art.metadata.installed
    if installed is None:
        return None
    if platform == ANY:
        return art.metadata.distributions()
    short = "/".join(platform.split("/")[:2])
    for entry in installed:
        if entry.platform in (platform, short):
            return entry.distributions
    return None


def _base_of(layout: Path, manifest_digest: str) -> BaseImage | None:
    """The base image a platform manifest of `layout` names in its annotations."""
    try:
        data = json.loads(blob_path(layout, manifest_digest).read_bytes())
    except (OSError, ValueError, OCIError):
        return None
    notes = data.get("annotations") or {} if isinstance(data, dict) else {}
    name = notes.get(_BASE_NAME)
    return BaseImage(name, notes.get(_BASE_DIGEST, "")) if isinstance(name, str) else None


def _references(hubs: tuple[str, ...], binary: str, tag: str) -> tuple[str, ...]:
    """`host/repository:tag` of `binary`'s `tag` on each of `hubs`."""
    return tuple(f"{h.host}/{h.repository(binary)}:{tag}" for h in map(parse_hub, hubs))


def _write_sbom(tmp: Path, rel: str, text: str, **fields: str | None) -> StagedFile:
    (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(tmp / rel, text.encode())
    return StagedFile.read(tmp, rel, "sbom", **fields)


def _zipapp_sboms(ctx: ReleaseContext, tmp: Path, built: tuple[Artifact, ...]) -> list[StagedFile]:
    """An SBOM per zipapp whose contents are known, describing the zipapp's path."""
    entries = []
    for art in select(built, kind="zipapp"):
        dists = _installed_for(art, art.platform)
        if dists is None:
            continue
        of = staged_path("zipapp", art.path.name)
        version = ctx.version_of(art.binary)
        text = contents_sbom(art.binary, version, art.platform, dists, epoch=ctx.stamp.epoch, of=of)
        rel = staged_path("sbom", art.path.name.removesuffix(".pyz"))
        entries.append(_write_sbom(tmp, rel, text, binary=art.binary, platform=art.platform, of=of))
    return entries


def _platform_sboms(
    ctx: ReleaseContext, tmp: Path, art: Artifact, variant: str
) -> list[StagedFile] | None:
    """An SBOM per platform manifest of the image `art`; None unless every platform's
    contents are known."""
    image = art.metadata.image
    assert image is not None
    version = ctx.version_of(art.binary)
    suffix = f"-{variant}" if variant else ""
    documents = []
    for manifest in image.manifests:
        dists = _installed_for(art, manifest.platform)
        if dists is None:
            return None
        flat = manifest.platform.replace("/", "_")
        rel = staged_path("sbom", f"{art.binary}-{version}-image{suffix}-{flat}")
        base = _base_of(art.path.parent, manifest.digest)
        of = manifest.digest
        text = contents_sbom(
            art.binary, version, manifest.platform, dists, epoch=ctx.stamp.epoch, of=of, base=base
        )
        fields = {"binary": art.binary, "platform": manifest.platform, "of": of}
        documents.append(
            _write_sbom(tmp, rel, text, **fields, image=image.digest, variant=variant or None)
        )
    return documents


def _attached(tmp: Path, image: StagedImage, documents: list[StagedFile]) -> StagedImage:
    """`image` with its SBOM attachments: the index's (every platform's document, in
    order) and one per platform manifest (one layer), as ko attaches them, which is
    what `cosign download sbom --platform` reads."""

    def made(tag: str, docs: list[StagedFile], platform: str = "", of: str = "") -> ImageSbom:
        attached = attachment([(d.name, d.platform, (tmp / d.path).read_bytes()) for d in docs])
        references = _references(image.hubs, image.binary, tag)
        paths = tuple(d.path for d in docs)
        return ImageSbom(tag, attached.digest, paths, references, platform, of)

    platforms = tuple(
        made(attached_tag(str(d.of), "sbom"), [d], d.platform, str(d.of)) for d in documents
    )
    index = made(attached_tag(image.digest, "sbom"), documents)
    return replace(image, sbom=index, platform_sboms=platforms)


def stage_sboms(
    ctx: ReleaseContext, tmp: Path, built: tuple[Artifact, ...], images: list[StagedImage]
) -> tuple[list[StagedFile], set[str], list[StagedImage]]:
    """An SBOM per zipapp and per image platform (and variant) whose contents are
    known: the SBOM files, the binaries they cover, and `images` with the
    attachments publish pushes (`StagedImage.sbom`)."""
    entries = _zipapp_sboms(ctx, tmp, built)
    covered = {e.binary for e in entries if e.binary}
    by_key = {(i.binary, i.variant): i for i in images}
    done: set[str] = set()  # a variant equal to the default has the default's SBOMs
    for art in select(built, kind="image"):
        variant = variant_of(art)
        entry = by_key.get((art.binary, variant))
        if art.metadata.image is None or entry is None or art.metadata.image.digest in done:
            continue
        documents = _platform_sboms(ctx, tmp, art, variant)
        if not documents:
            continue
        entries += documents
        done.add(art.metadata.image.digest)
        covered.add(art.binary)
        by_key[(art.binary, variant)] = _attached(tmp, entry, documents)
    return entries, covered, list(by_key.values())


def _locked_dependencies(ctx: ReleaseContext, binary: Binary) -> list[tuple[str, str]] | None:
    """(name, version) of what installing `binary`'s wheel brings, as uv.lock says: its
    locked third-party slice and the in-repo libraries it needs at the versions their
    wheels were built with; None without a lock or a project for the binary."""
    workspace = ctx.plan.workspace
    project = workspace.project_at(binary.source) if workspace is not None else None
    if workspace is None or workspace.lock is None or project is None:
        return None
    found = {p.name: p.version for p in workspace.lock.slice(project.key, binary.extras)}
    built = {
        str(canonicalize_name(art.metadata.wheel.name)): art.metadata.wheel.version
        for result in (ctx.build.results if ctx.build else ())
        for art in select(result.outputs, kind="wheel")
        if art.metadata.wheel is not None
    }
    for library in workspace.closure(project.key, binary.extras):
        if library.key in built:
            found[library.name] = built[library.key]
    return sorted(found.items())


def binary_sboms(
    ctx: ReleaseContext, tmp: Path, built: tuple[Artifact, ...], covered: set[str]
) -> list[StagedFile]:
    """The binary-level SBOM (`sbom/<binary>.cdx.json`) of each binary with a wheel and
    no artifact of known contents: from what its artifacts installed, else uv.lock,
    else a resolve of the wheel's requirements."""
    wheel_of: dict[str, Artifact] = {}
    for result in ctx.build.results if ctx.build else ():
        for art in select(result.outputs, kind="wheel"):
            wheel_of.update(dict.fromkeys(result.action.binaries, art))
    files = []
    for binary in ctx.plan.binaries:
        wheel = wheel_of.get(binary.name)
        if wheel is None or binary.name in covered:
            continue
        own = wheel.metadata.wheel.name if wheel.metadata.wheel else None
        deps = installed_dependencies(select(built, binary=binary.name), own)
        if deps is None:  # nothing installed that is known: the lock says, if any
            deps = _locked_dependencies(ctx, binary)
        if deps is None:  # no lock either: resolve the wheel's needs
            reqs = wheel_requirements(wheel.path)
            deps = sorted(resolve_requirements(reqs, python=ctx.manifest.project.python).items())
        text = sbom_json(binary.name, ctx.version_of(binary.name), deps, epoch=ctx.stamp.epoch)
        rel = staged_path("sbom", binary.name)
        atomic_write(tmp / rel, text.encode())
        files.append(StagedFile.read(tmp, rel, "sbom", binary=binary.name, platform=ANY))
    return files
