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

import os
import shutil
from pathlib import Path

from shipyard import git
from shipyard._fs import atomic_write, sha256_file
from shipyard.artifacts import ANY, Artifact, select
from shipyard.builders.image.variants import VARIANTS_DIR, variant_layout, variant_of
from shipyard.builders.wheel import build_info
from shipyard.dist import temp_prefix
from shipyard.oci.remote.push import variant_tags
from shipyard.release.archives import find_license, write_release_archive
from shipyard.release.building import artifacts as built_artifacts
from shipyard.release.building import released_wheels
from shipyard.release.context import ReleaseContext
from shipyard.release.keys import sign_sums
from shipyard.release.sbom_staging import binary_sboms, stage_sboms
from shipyard.release.staged import (
    JOURNAL,
    RELEASE_JSON,
    SUMS,
    UNSUMMED,
    PlatformEntry,
    StagedFile,
    StagedImage,
    StagedRelease,
    covering,
    staged_path,
)

__all__ = ["StageRelease", "changelog", "sha256sums"]


def sha256sums(folder: Path) -> str:
    """`sha256sum` output for every file under `folder` but the sums and the journal."""
    lines = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel not in UNSUMMED:
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


def _stage_images(
    ctx: ReleaseContext, tmp: Path, binary: str, built: tuple[Artifact, ...]
) -> list[StagedImage]:
    """Copy `binary`'s image layouts into `tmp`; their release.json entries.

    The default image goes to images/<binary>/, each variant to its own layout
    inside it (`variant_layout`), listed with its name, its tags suffixed
    `-<variant>` and whether it is the default image itself (`collapsed`).
    """
    entries: list[StagedImage] = []
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
        entries.append(
            StagedImage(
                binary=binary,
                path=rel,
                digest=image.digest,
                media_type=image.media_type,
                size=image.size,
                platforms=tuple(image.platforms),
                manifests=tuple(
                    PlatformEntry(m.platform, m.digest, m.size) for m in image.manifests
                ),
                hubs=tuple(settings.hubs),
                tags=tuple(variant_tags(tags, variant)),
                variant=variant,
                collapsed=bool(variant) and image.digest == default_digest,
            )
        )
    return entries


def _stage_archives(
    ctx: ReleaseContext, tmp: Path, zipapps: tuple[Artifact, ...]
) -> list[StagedFile]:
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
    entries: list[StagedFile] = []
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
            entries.append(
                StagedFile.read(tmp, rel, "archive", binary=art.binary, platform=platform)
            )
    return entries


def _sign_provenance(ctx: ReleaseContext, folder: Path, staged: StagedRelease) -> None:
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

    def _fill(self, ctx: ReleaseContext, tmp: Path) -> StagedRelease:
        built = built_artifacts(ctx)
        artifacts: list[StagedFile | StagedImage] = [*_stage_files(ctx, tmp, built)]
        artifacts += _stage_archives(ctx, tmp, select(built, kind="zipapp"))
        images = [
            image
            for binary in ctx.image_binaries()
            for image in _stage_images(ctx, tmp, binary.name, select(built, kind="image"))
        ]
        sboms, covered, images = stage_sboms(ctx, tmp, built, images)
        artifacts += [*images, *sboms, *binary_sboms(ctx, tmp, built, covered)]
        notes = changelog(ctx.root, ctx.manifest.project.name, ctx.stamp.version)
        atomic_write(tmp / "CHANGELOG.md", notes.encode())
        staged = StagedRelease(
            project=ctx.manifest.project.name,
            version=ctx.stamp.version,
            tag=ctx.stamp.tag,
            revision=ctx.stamp.revision,
            snapshot=ctx.options.snapshot,
            build=build_info(ctx.stamp),
            artifacts=tuple(artifacts),
        )
        atomic_write(tmp / RELEASE_JSON, staged.dumps())
        if ctx.signing_key is not None:  # provenance over release.json, listed in the sums
            _sign_provenance(ctx, tmp, staged)
        sums = sha256sums(tmp)
        atomic_write(tmp / SUMS, sums.encode())
        if ctx.signing_key is not None:
            sign_sums(tmp, ctx.signing_key)
        if ctx.publishing and not ctx.options.dry_run:
            (tmp / JOURNAL).touch()  # marks the folder as a release to resume
        return staged.with_files(*covering(tmp))


def _stage_files(ctx: ReleaseContext, tmp: Path, built: tuple[Artifact, ...]) -> list[StagedFile]:
    """The released wheels and the zipapps, copied into `tmp`."""
    files = []
    for _, art in released_wheels(ctx):
        rel = staged_path("wheel", art.path.name)
        (tmp / rel).parent.mkdir(exist_ok=True)
        shutil.copy2(art.path, tmp / rel)
        files.append(StagedFile.read(tmp, rel, "wheel", platform=art.platform))
    for art in select(built, kind="zipapp"):
        rel = staged_path("zipapp", art.path.name)
        (tmp / rel).parent.mkdir(exist_ok=True)
        shutil.copy2(art.path, tmp / rel)
        files.append(StagedFile.read(tmp, rel, "zipapp", binary=art.binary, platform=art.platform))
    return files
