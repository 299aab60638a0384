"""The stage stage: dist/release/<version>/ with artifacts, SBOMs, sums and release.json.

SBOMs describe what shipped (`sbom.contents_sbom`): one per zipapp
(`sbom/<zipapp name without .pyz>.cdx.json`) and one per platform of each image
and image variant (`sbom/<binary>-<version>-image[-<variant>]-<os>_<arch>.cdx.json`),
each listed in release.json as kind `sbom` with `binary`, `platform` and `of`
(the zipapp's path, or the platform manifest's digest; `image` the index digest).
An image entry names the SBOM attachment publish pushes next to it (`sbom`).
A binary none of whose artifacts has known contents (only a wheel, or a
Dockerfile image) keeps the binary-level `sbom/<binary>.cdx.json`, resolved from
its wheel's requirements.

The folder is assembled under a temporary name and renamed into place, so it
exists whole or not at all. Publish reads only this folder, so a resumed release
publishes exactly what was staged.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from shipyard import git
from shipyard._fs import atomic_write, sha256_file
from shipyard.artifacts import ANY, Artifact, Distribution, select
from shipyard.builders.image.variants import VARIANTS_DIR, variant_layout, variant_of
from shipyard.builders.wheel import build_info
from shipyard.dist import staged_path, temp_prefix
from shipyard.manifest import Binary
from shipyard.oci.layout import blob_path
from shipyard.oci.model import OCIError
from shipyard.oci.remote.attach import attached_tag
from shipyard.oci.remote.push import parse_hub, variant_tags
from shipyard.release.archives import find_license, write_release_archive
from shipyard.release.building import artifacts as built_artifacts
from shipyard.release.building import released_wheels
from shipyard.release.context import ReleaseContext
from shipyard.release.journal import JOURNAL_NAME
from shipyard.release.sbom import (
    BaseImage,
    attachment,
    contents_sbom,
    installed_dependencies,
    resolve_requirements,
    sbom_json,
    wheel_requirements,
)
from shipyard.release.signing import SUMS_SIG, sign_sums

__all__ = ["RELEASE_JSON", "SUMS", "StageRelease", "changelog", "sha256sums"]

RELEASE_JSON = "release.json"
SUMS = "SHA256SUMS"
# The sums, their signature (of the sums) and the journal are not in SHA256SUMS.
_UNSUMMED = {SUMS, SUMS_SIG, JOURNAL_NAME}


def sha256sums(folder: Path) -> str:
    """`sha256sum` output for every file under `folder` but the sums and the journal."""
    lines = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel not in _UNSUMMED:
            lines.append(f"{sha256_file(path)}  {rel}\n")
    return "".join(lines)


def _git(root: Path, *args: str) -> str | None:
    found = git.output(root, *args)
    return None if found is None else found.decode(errors="replace").strip()


def changelog(root: Path, project: str, version: str) -> str:
    """CHANGELOG.md: `git log <previous tag>..HEAD --oneline` (all history with no tag)."""
    previous = _git(root, "describe", "--tags", "--abbrev=0", "--match", "*[0-9]*", "HEAD")
    span = f"{previous}..HEAD" if previous else "HEAD"
    log = _git(root, "log", span, "--oneline", "--no-decorate") or ""
    since = f"since {previous}" if previous else "(first release)"
    lines = [f"# {project} {version}", "", f"Changes {since}:", ""]
    lines += [f"- {line}" for line in log.splitlines()] or ["- (no commits)"]
    return "\n".join(lines) + "\n"


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _file(folder: Path, rel: str, **extra: Any) -> dict[str, Any]:
    path = folder / rel
    return {**extra, "path": rel, "sha256": sha256_file(path), "size": path.stat().st_size}


def _stage_images(
    ctx: ReleaseContext, tmp: Path, binary: str, built: tuple[Artifact, ...]
) -> list[dict[str, Any]]:
    """Copy `binary`'s image layouts into `tmp`; their release.json entries.

    The default image goes to images/<binary>/, each variant to its own layout
    inside it (`variant_layout`), listed with its name, its tags suffixed
    `-<variant>` and whether it is the default image itself (`collapsed`).
    """
    entries: list[dict[str, Any]] = []
    settings = ctx.binary(binary).image
    tags = list(ctx.image_tags(ctx.binary(binary)))
    # The default image first, whatever order the build listed them in.
    found = sorted(
        ((variant_of(a), a) for a in select(built, binary=binary) if a.metadata.image),
        key=lambda pair: pair[0],
    )
    default_digest = next(
        (a.metadata.image.digest for v, a in found if not v and a.metadata.image), None
    )
    for variant, art in found:
        image = art.metadata.image
        if image is None:
            continue
        rel = variant_layout(Path(staged_path("image", binary)), variant).as_posix()
        source = art.path.parent
        shutil.copytree(
            source,
            tmp / rel,
            copy_function=_link_or_copy,
            # The variants' layouts are copied as their own artifacts.
            ignore=lambda folder, _names, top=source: [VARIANTS_DIR] if Path(folder) == top else [],
        )
        entry: dict[str, Any] = {
            "kind": "image",
            "binary": binary,
            "path": rel,
            "digest": image.digest,
            "media_type": image.media_type,
            "size": image.size,
            "platform": list(image.platforms),
            "manifests": [
                {"platform": m.platform, "digest": m.digest, "size": m.size}
                for m in image.manifests
            ],
            "hubs": list(settings.hubs),
            "tags": list(variant_tags(tags, variant)),
        }
        if variant:
            entry |= {"variant": variant, "collapsed": image.digest == default_digest}
        entries.append(entry)
    return entries


def _stage_archives(
    ctx: ReleaseContext, tmp: Path, zipapps: tuple[Artifact, ...]
) -> list[dict[str, Any]]:
    """One release archive per platform of each zipapp binary (`archives`), in
    archives/; their release.json entries.

    A per-platform zipapp goes into its platform's archive; a universal one into the
    archive of every platform its binary's zipapp was built for.
    """
    if not zipapps:
        return []  # no archive ships the license: a release of wheels never reads it
    license_file = find_license(ctx.manifest.root)
    platforms = {
        action.binaries[0]: action.platforms
        for action in ctx.plan.actions
        if action.kind == "zipapp" and action.binaries
    }
    entries: list[dict[str, Any]] = []
    for art in zipapps:
        for platform in platforms.get(art.binary, ()) if art.platform == ANY else (art.platform,):
            made = write_release_archive(
                tmp / staged_path("archive", ""),
                zipapp=art.path,
                binary=art.binary,
                version=ctx.version_of(art.binary),
                platform=platform,
                license_file=license_file,
                epoch=ctx.stamp.epoch,
            )
            rel = made.relative_to(tmp).as_posix()
            entries.append(_file(tmp, rel, kind="archive", binary=art.binary, platform=platform))
    return entries


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


def _references(hubs: list[str], binary: str, tag: str) -> list[str]:
    """`host/repository:tag` of `binary`'s `tag` on each of `hubs`."""
    return [f"{h.host}/{h.repository(binary)}:{tag}" for h in map(parse_hub, hubs)]


def _write_sbom(tmp: Path, rel: str, text: str, **extra: Any) -> dict[str, Any]:
    (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(tmp / rel, text.encode())
    return _file(tmp, rel, kind="sbom", **extra)


def _stage_sboms(
    ctx: ReleaseContext,
    tmp: Path,
    built: tuple[Artifact, ...],
    staged: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], set[str]]:
    """An SBOM per zipapp and per image platform (and variant) whose contents are
    known; their release.json entries and the binaries they cover. Each staged image
    entry with SBOMs gets `sbom`: the attachment publish pushes (its tag, manifest
    digest, the documents in layer order, and the reference on each hub)."""
    entries: list[dict[str, Any]] = []
    covered: set[str] = set()
    epoch = ctx.stamp.epoch
    for art in select(built, kind="zipapp"):
        dists = _installed_for(art, art.platform)
        if dists is None:
            continue
        of = staged_path("zipapp", art.path.name)
        name = art.path.name.removesuffix(".pyz")
        version = ctx.version_of(art.binary)
        text = contents_sbom(art.binary, version, art.platform, dists, epoch=epoch, of=of)
        rel = staged_path("sbom", name)
        entries.append(_write_sbom(tmp, rel, text, binary=art.binary, platform=art.platform, of=of))
        covered.add(art.binary)
    images = {(e["binary"], e.get("variant", "")): e for e in staged if e["kind"] == "image"}
    done: set[str] = set()  # a variant equal to the default has the default's SBOMs
    for art in select(built, kind="image"):
        image, variant = art.metadata.image, variant_of(art)
        entry = images.get((art.binary, variant))
        if image is None or entry is None or image.digest in done:
            continue
        version = ctx.version_of(art.binary)
        documents: list[tuple[str, str, str]] = []
        for manifest in image.manifests:
            dists = _installed_for(art, manifest.platform)
            if dists is None:
                break
            base = _base_of(art.path.parent, manifest.digest)
            suffix = f"-{variant}" if variant else ""
            flat = manifest.platform.replace("/", "_")
            rel = staged_path("sbom", f"{art.binary}-{version}-image{suffix}-{flat}")
            text = contents_sbom(
                art.binary,
                version,
                manifest.platform,
                dists,
                epoch=epoch,
                of=manifest.digest,
                base=base,
            )
            extra: dict[str, Any] = {"variant": variant} if variant else {}
            entries.append(
                _write_sbom(
                    tmp,
                    rel,
                    text,
                    binary=art.binary,
                    platform=manifest.platform,
                    of=manifest.digest,
                    image=image.digest,
                    **extra,
                )
            )
            documents.append((rel, manifest.platform, manifest.digest))
        else:
            if not documents:
                continue
            done.add(image.digest)
            covered.add(art.binary)
            attached = attachment(
                [
                    (Path(rel).name, platform, (tmp / rel).read_bytes())
                    for rel, platform, _ in documents
                ]
            )
            hubs = [str(text) for text in entry["hubs"]]
            # One manifest per platform image too (one layer), as ko attaches them:
            # what `cosign download sbom --platform` reads.
            platforms = []
            for rel, platform, digest in documents:
                one = attachment([(Path(rel).name, platform, (tmp / rel).read_bytes())])
                platforms.append(
                    {
                        "platform": platform,
                        "of": digest,
                        "tag": attached_tag(digest, "sbom"),
                        "digest": one.digest,
                        "documents": [rel],
                        "references": _references(hubs, art.binary, attached_tag(digest, "sbom")),
                    }
                )
            tag = attached_tag(image.digest, "sbom")
            entry["sbom"] = {
                "tag": tag,
                "digest": attached.digest,
                "documents": [rel for rel, _, _ in documents],
                "references": _references(hubs, art.binary, tag),
                "platforms": platforms,
            }
    return entries, covered


def _sign_provenance(ctx: ReleaseContext, folder: Path, staged: dict[str, Any]) -> None:
    """Write provenance.intoto.jsonl: the SLSA v1 Statement of the staged release (its
    subjects: every artifact of `staged`), in a DSSE envelope signed with the key."""
    from shipyard.release.provenance import provenance_statement, write_provenance

    assert ctx.signing_key is not None
    options = ctx.options
    parameters = {
        "version": ctx.stamp.version,
        "binaries": sorted(b.name for b in ctx.plan.binaries),
        "snapshot": options.snapshot,
        "dry_run": options.dry_run,
        "allow_dirty": options.allow_dirty,
        "clobber": options.clobber,
        "force_protected": options.force_protected,
    }
    statement = provenance_statement(
        staged,
        manifest_path=ctx.manifest.path,
        parameters=parameters,
        finished=ctx.stamp.created,
    )
    write_provenance(folder, statement, ctx.signing_key)


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


class StageRelease:
    """Assembles dist/release/<version>/ atomically; named `stage` in the pipeline."""

    name = "stage"

    def skip(self, ctx: ReleaseContext) -> str | None:
        """Skipped when resuming: the staged folder is already complete."""
        return "resuming: dist/release/<version> is already staged" if ctx.resuming else None

    def run(self, ctx: ReleaseContext) -> None:
        """Write the folder under a temporary name, then rename it into place."""
        target = ctx.release_dir
        tmp = target.parent / f"{temp_prefix()}{target.name}.{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            ctx.staged = self._fill(ctx, tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        # Replaced whole, never merged: nothing that was in the folder before
        # (a stray file, an old journal) survives into the staged release.
        old = target.parent / f"{temp_prefix('replaced')}{target.name}.{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        try:
            if target.exists():
                os.replace(target, old)
            os.replace(tmp, target)
        except BaseException:
            if old.exists() and not target.exists():
                os.replace(old, target)  # put the previous folder back as it was
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        shutil.rmtree(old, ignore_errors=True)

    def _fill(self, ctx: ReleaseContext, tmp: Path) -> dict[str, Any]:
        artifacts: list[dict[str, Any]] = []
        built = built_artifacts(ctx)
        wheel_of: dict[str, Artifact] = {}
        for result in ctx.build.results if ctx.build else ():
            for art in select(result.outputs, kind="wheel"):
                wheel_of.update(dict.fromkeys(result.action.binaries, art))
        for _, art in released_wheels(ctx):
            rel = staged_path("wheel", art.path.name)
            (tmp / rel).parent.mkdir(exist_ok=True)
            shutil.copy2(art.path, tmp / rel)
            artifacts.append(_file(tmp, rel, kind="wheel", platform=art.platform))
        for art in select(built, kind="zipapp"):
            rel = staged_path("zipapp", art.path.name)
            (tmp / rel).parent.mkdir(exist_ok=True)
            shutil.copy2(art.path, tmp / rel)
            artifacts.append(
                _file(tmp, rel, kind="zipapp", binary=art.binary, platform=art.platform)
            )
        artifacts += _stage_archives(ctx, tmp, select(built, kind="zipapp"))
        for binary in ctx.image_binaries():
            artifacts += _stage_images(ctx, tmp, binary.name, select(built, kind="image"))
        sboms, covered = _stage_sboms(ctx, tmp, built, artifacts)
        artifacts += sboms
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
                deps = sorted(
                    resolve_requirements(reqs, python=ctx.manifest.project.python).items()
                )
            text = sbom_json(binary.name, ctx.version_of(binary.name), deps, epoch=ctx.stamp.epoch)
            rel = staged_path("sbom", binary.name)
            atomic_write(tmp / rel, text.encode())
            artifacts.append(_file(tmp, rel, kind="sbom", binary=binary.name, platform=ANY))
        notes = changelog(ctx.root, ctx.manifest.project.name, ctx.stamp.version)
        atomic_write(tmp / "CHANGELOG.md", notes.encode())
        staged: dict[str, Any] = {
            "schema": 1,
            "project": ctx.manifest.project.name,
            "version": ctx.stamp.version,
            "tag": ctx.stamp.tag,
            "revision": ctx.stamp.revision,
            "snapshot": ctx.options.snapshot,
            "build": build_info(ctx.stamp),
            "artifacts": artifacts,
        }
        atomic_write(tmp / RELEASE_JSON, (json.dumps(staged, indent=2) + "\n").encode())
        if ctx.signing_key is not None:  # provenance over release.json, listed in the sums
            _sign_provenance(ctx, tmp, staged)
        atomic_write(tmp / SUMS, sha256sums(tmp).encode())
        if ctx.signing_key is not None:
            sign_sums(tmp, ctx.signing_key)
        if ctx.publishing and not ctx.options.dry_run:
            (tmp / JOURNAL_NAME).touch()  # marks the folder as a release to resume
        return staged
