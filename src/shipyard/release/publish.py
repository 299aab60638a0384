"""The publish and verify stages: push what was staged, then pull it back and compare.

Publish works from dist/release/<version>/ alone. Every finished step goes into
the journal; a re-run skips journalled steps, and the registry's and index's own
existence checks catch a step that finished just before a crash. Something
already there with the same digest is success; with another digest, an error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shipyard.errors import ShipyardError
from shipyard.oci.push import Publisher, parse_hub
from shipyard.release.context import ReleaseContext
from shipyard.release.index import PackageIndex
from shipyard.release.journal import JOURNAL_NAME, Journal
from shipyard.release.preflight import RELEASED_STEP

__all__ = ["Publish", "PublishError", "Verify", "publish_steps"]


class PublishError(ShipyardError):
    """Publishing or verifying failed: what, where, and what was found instead (exit 1)."""


def _artifacts(ctx: ReleaseContext, kind: str) -> list[dict[str, Any]]:
    staged = ctx.staged or {}
    return [a for a in staged.get("artifacts", []) if a.get("kind") == kind]


def publish_steps(staged: dict[str, Any]) -> list[str]:
    """The journal keys of every publish step of a staged release, in order."""
    steps = []
    for art in staged.get("artifacts", []):
        if art.get("kind") == "image":
            steps += [f"image {hub}/{art['binary']}@{art['digest']}" for hub in art["hubs"]]
    for art in staged.get("artifacts", []):
        if art.get("kind") == "wheel":
            steps.append(f"wheel {Path(art['path']).name}")
    return steps


def _index(ctx: ReleaseContext) -> PackageIndex:
    if ctx.index is None:
        raise PublishError("wheels are staged but no package index is set (SHIPYARD_INDEX_URL)")
    return ctx.index


class Publish:
    """Images to every hub (tags last), wheels to the package index, journalled."""

    name = "publish"

    def skip(self, ctx: ReleaseContext) -> str | None:
        """Snapshots publish nothing."""
        return "snapshot: nothing is published" if ctx.options.snapshot else None

    def run(self, ctx: ReleaseContext) -> None:
        """Publish each step not yet journalled; in a dry run, only report each step."""
        folder, dry = ctx.release_dir, ctx.options.dry_run
        journal = Journal(folder / JOURNAL_NAME)
        publisher = Publisher(ctx.registry_for, on_step=ctx.on_step)
        for art in _artifacts(ctx, "image"):
            binary, digest, tags = art["binary"], art["digest"], art["tags"]
            for hub_text in art["hubs"]:
                step = f"image {hub_text}/{binary}@{digest}"
                if journal.done(step):
                    ctx.on_step(f"journalled {step}")
                    continue
                if dry:
                    ctx.on_step(f"would push {step} with tags {', '.join(tags)}")
                    continue
                hub = parse_hub(hub_text)
                repo = hub.repository(binary)
                found = publisher.client(hub.host).manifest_exists(repo, tags[0])
                if found not in (None, digest):
                    raise PublishError(
                        f"{hub.host}/{repo}:{tags[0]} already exists with {found}, "
                        f"not the staged {digest}; this version was released differently"
                    )
                publisher.push(binary, folder / art["path"], [hub_text], tags)
                journal.record(step, digest=digest, tags=tags)
        for art in _artifacts(ctx, "wheel"):
            name = Path(art["path"]).name
            step = f"wheel {name}"
            if journal.done(step):
                ctx.on_step(f"journalled {step}")
                continue
            index = _index(ctx)
            if dry:
                ctx.on_step(f"would upload {step} to {index.url}")
                continue
            found = index.sha256(name)
            if found == art["sha256"]:
                ctx.on_step(f"have {step} on {index.url}")
            elif found is not None:
                raise PublishError(
                    f"{index.url} already has {name} with sha256 {found}, not the staged "
                    f"{art['sha256']}; an index never replaces a file: release a new version"
                )
            else:
                index.upload(folder / art["path"])
                ctx.on_step(f"uploaded {step} to {index.url}")
            journal.record(step, sha256=art["sha256"])


class Verify:
    """Pulls every tag and wheel back and compares digests with release.json."""

    name = "verify"

    def skip(self, ctx: ReleaseContext) -> str | None:
        """Nothing to verify when nothing was published."""
        if ctx.options.snapshot:
            return "snapshot: nothing was published"
        return "dry run: nothing was published" if ctx.options.dry_run else None

    def run(self, ctx: ReleaseContext) -> None:
        """Raise PublishError naming the first mismatch; journal the release as done."""
        publisher = Publisher(ctx.registry_for)
        for art in _artifacts(ctx, "image"):
            for hub_text in art["hubs"]:
                hub = parse_hub(hub_text)
                repo = hub.repository(art["binary"])
                client = publisher.client(hub.host)
                for tag in art["tags"]:
                    data, _, digest = client.get_manifest(repo, tag)
                    if digest != art["digest"]:
                        raise PublishError(
                            f"{hub.host}/{repo}:{tag} is {digest}, "
                            f"release.json says {art['digest']}"
                        )
                    for entry in json.loads(data).get("manifests", []):
                        if client.manifest_exists(repo, entry["digest"]) != entry["digest"]:
                            raise PublishError(f"{hub.host}/{repo}@{entry['digest']} is missing")
                ctx.on_step(f"verified {hub.host}/{repo} {', '.join(art['tags'])}")
        for art in _artifacts(ctx, "wheel"):
            name = Path(art["path"]).name
            found = _index(ctx).sha256(name)
            if found != art["sha256"]:
                raise PublishError(f"the index serves {name} as {found}, expected {art['sha256']}")
            ctx.on_step(f"verified wheel {name}")
        Journal(ctx.release_dir / JOURNAL_NAME).record(RELEASED_STEP, version=ctx.stamp.version)
