"""The stage stage: dist/release/<version>/ with artifacts, SBOMs, sums and release.json.

The folder is assembled under a temporary name and renamed into place, so it
exists whole or not at all. Publish reads only this folder, so a resumed release
publishes exactly what was staged.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from shipyard._fs import atomic_write, sha256_file
from shipyard.artifacts import ANY, Artifact, select
from shipyard.builders.image.variants import VARIANTS_DIR, variant_layout, variant_of
from shipyard.builders.wheel import build_info
from shipyard.dist import staged_path, temp_prefix
from shipyard.oci.remote.push import variant_tags
from shipyard.release.archives import find_license, write_release_archive
from shipyard.release.building import artifacts as built_artifacts
from shipyard.release.context import ReleaseContext
from shipyard.release.journal import JOURNAL_NAME
from shipyard.release.sbom import (
    installed_dependencies,
    resolve_requirements,
    sbom_json,
    wheel_requirements,
)

__all__ = ["RELEASE_JSON", "SUMS", "StageRelease", "changelog", "sha256sums"]

RELEASE_JSON = "release.json"
SUMS = "SHA256SUMS"
_UNSUMMED = {SUMS, JOURNAL_NAME}


def sha256sums(folder: Path) -> str:
    """`sha256sum` output for every file under `folder` but the sums and the journal."""
    lines = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel not in _UNSUMMED:
            lines.append(f"{sha256_file(path)}  {rel}\n")
    return "".join(lines)


def _git(root: Path, *args: str) -> str | None:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() if done.returncode == 0 else None


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
                version=ctx.stamp.version,
                platform=platform,
                license_file=license_file,
                epoch=ctx.stamp.epoch,
            )
            rel = made.relative_to(tmp).as_posix()
            entries.append(_file(tmp, rel, kind="archive", binary=art.binary, platform=platform))
    return entries


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
        released: list[Artifact] = []
        declared = {b.name for b in ctx.plan.binaries if "wheel" in b.outputs}
        libraries = ctx.libraries()
        for result in ctx.build.results if ctx.build else ():
            action = result.action
            for art in select(result.outputs, kind="wheel"):
                wheel_of.update(dict.fromkeys(action.binaries, art))
                # Wheels built only as inputs of zipapps and images are not released;
                # the libraries a released wheel requires are.
                if declared & set(action.binaries) or (
                    not action.binaries and action.project in libraries
                ):
                    released.append(art)
        for art in released:
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
        for binary in ctx.plan.binaries:
            wheel = wheel_of.get(binary.name)
            if wheel is None:
                continue
            own = wheel.metadata.wheel.name if wheel.metadata.wheel else None
            deps = installed_dependencies(select(built, binary=binary.name), own)
            if deps is None:  # nothing installed that is known: resolve the wheel's needs
                reqs = wheel_requirements(wheel.path)
                deps = sorted(
                    resolve_requirements(reqs, python=ctx.manifest.project.python).items()
                )
            text = sbom_json(binary.name, ctx.stamp.version, deps, epoch=ctx.stamp.epoch)
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
        atomic_write(tmp / SUMS, sha256sums(tmp).encode())
        if ctx.publishing and not ctx.options.dry_run:
            (tmp / JOURNAL_NAME).touch()  # marks the folder as a release to resume
        return staged
