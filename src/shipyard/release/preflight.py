"""Preflight: everything a release needs is checked before anything is built.

The version, the git tag, the working tree, the files stage copies from the checkout
(the license), the staging folder, protected hubs, every hub and the package index
with their credentials, and every tag the release will move (no-clobber, see
`rails`). A resumed release (dist/release/<version> has a publish journal) may find
its own images on the hubs; the journal says which.
"""

from __future__ import annotations

import dataclasses

from packaging.version import InvalidVersion, Version

from shipyard import git
from shipyard.errors import UsageError
from shipyard.oci.remote.push import parse_hub
from shipyard.oci.remote.registry import RegistryError
from shipyard.release.archives import find_license
from shipyard.release.context import ReleaseContext
from shipyard.release.journal import JOURNAL_NAME, Journal
from shipyard.release.rails import (
    check_protected,
    clash_error,
    find_clashes,
    journal_digests,
    refused_hubs,
)
from shipyard.release.staged import RELEASE_JSON, StagedError, loads

__all__ = ["RELEASED_STEP", "Preflight"]

# The journal's last step: once recorded, the version is released.
RELEASED_STEP = "release"


def _git_tag_exists(ctx: ReleaseContext, tag: str) -> bool:
    return git.output(ctx.root, "rev-parse", "-q", "--verify", f"refs/tags/{tag}") is not None


class Preflight:
    """Checks version, tree, tags, staging folder, hubs and index; builds nothing."""

    name = "preflight"

    def skip(self, ctx: ReleaseContext) -> str | None:
        """Never skipped: even a snapshot checks its version."""
        return None

    def run(self, ctx: ReleaseContext) -> None:
        """Raise UsageError (exit 2) naming the first problem and its fix."""
        try:
            version = str(Version(ctx.stamp.version))
        except InvalidVersion:
            raise UsageError(
                f"release version '{ctx.stamp.version}' is not a PEP 440 version; "
                "use e.g. 1.4.0 or 1.4.0rc1"
            ) from None
        ctx.stamp = dataclasses.replace(ctx.stamp, version=version)
        self._resume(ctx)
        if ctx.stamp.dirty and not (ctx.options.allow_dirty or ctx.options.snapshot):
            raise UsageError(
                "the working tree has uncommitted changes; commit or stash them, "
                "or pass --allow-dirty"
            )
        if ctx.publishing:
            for tag in (f"v{version}", version):
                if _git_tag_exists(ctx, tag):
                    raise UsageError(
                        f"version {version} is already released: git tag {tag} exists; "
                        "choose a new version"
                    )
        self._platforms(ctx)
        self._shipped_files(ctx)
        self._folder(ctx)
        self._signing_key(ctx)
        if ctx.publishing:
            self._protected(ctx)
            self._hubs(ctx)
            self._index(ctx)

    @staticmethod
    def _shipped_files(ctx: ReleaseContext) -> None:
        """The files stage copies from the checkout as they are (the license in each
        release archive, made for every zipapp) are checked now, not after the build:
        a symlink out of the repository or a special file stops the release here."""
        if not ctx.resuming and any(a.kind == "zipapp" for a in ctx.plan.actions):
            find_license(ctx.root)

    @staticmethod
    def _folder(ctx: ReleaseContext) -> None:
        """dist/release/<version> must be free, for a snapshot too (--clean replaces it).

        A resumed release publishes the folder it staged; a dry run stages into its
        own scratch folder (<version>.dry-run), replaced whole on every run.
        """
        folder = ctx.release_dir
        if not folder.exists() or ctx.resuming or ctx.options.clean or ctx.options.dry_run:
            return
        what = "a snapshot of this commit is" if ctx.options.snapshot else "a release is"
        raise UsageError(
            f"{folder} already exists ({what} staged there); pass --clean to replace it "
            "whole, or remove it"
        )

    @staticmethod
    def _platforms(ctx: ReleaseContext) -> None:
        """Every image of a release holds every platform its binary declares.

        `--platform` narrows what a build makes; a release that published such a
        subset under the version's tags would leave the other platforms out of them.
        A resumed release publishes what it staged (validated when it was made).
        """
        if ctx.resuming:
            return
        for binary in ctx.image_binaries():
            action = next(
                (a for a in ctx.plan.actions if a.kind == "image" and binary.name in a.binaries),
                None,
            )
            if action is None:
                continue  # no image at all: validate says so
            missing = [p for p in binary.image_platforms if p not in action.platforms]
            if missing:
                raise UsageError(
                    f"--platform leaves platform(s) {', '.join(missing)} out of {binary.name}'s "
                    "image, and a release ships every declared platform; drop --platform (or "
                    "build the subset with `shipyard build --platform` instead)"
                )

    def _resume(self, ctx: ReleaseContext) -> None:
        journal_path = ctx.release_dir / JOURNAL_NAME
        if ctx.options.clean or not ctx.publishing or not journal_path.is_file():
            return
        journal = Journal(journal_path)
        if journal.done(RELEASED_STEP):
            raise UsageError(
                f"version {ctx.stamp.version} is already released "
                f"({journal_path} records it); choose a new version"
            )
        try:
            staged = loads((ctx.release_dir / RELEASE_JSON).read_bytes())
        except (OSError, StagedError):
            raise UsageError(
                f"{ctx.release_dir} has a publish journal but no readable release.json; "
                "pass --clean to stage again"
            ) from None
        if staged.revision != ctx.stamp.revision:
            raise UsageError(
                f"{ctx.release_dir} was staged from revision {staged.revision}, "
                f"this is {ctx.stamp.revision}; check it out, or pass --clean"
            )
        ctx.staged = staged
        ctx.resuming = True

    @staticmethod
    def _signing_key(ctx: ReleaseContext) -> None:
        """Load the signing key now: a missing or wrong key stops the release (exit 2)
        before anything is built, naming the flag or variable, never the key."""
        from shipyard.release.keys import load_signing_key

        ctx.signing_key = load_signing_key(ctx.options.signing_key, ctx.env)
        if ctx.signing_key is not None:
            ctx.on_step("signing with the key from " + ctx.signing_key.source)

    @staticmethod
    def _protected(ctx: ReleaseContext) -> None:
        """Protected hubs only from CI or with --force-protected; a dry run pushes
        nothing, so it only says what a real release would refuse."""
        binaries = ctx.image_binaries()
        if not ctx.options.dry_run:
            check_protected(binaries, ctx.env, force=ctx.options.force_protected, command="release")
            return
        for refused in refused_hubs(binaries, ctx.env, force=ctx.options.force_protected):
            ctx.on_step(
                f"note: {refused.binary} -> {refused.hub} is a protected hub: a release outside "
                "CI stops here without --force-protected"
            )

    def _hubs(self, ctx: ReleaseContext) -> None:
        """Each hub answers and takes pushes; no tag the release moves names another image.

        Every tag the release pushes is checked (no-clobber): one that exists, is not
        in image.movable_tags and was not pushed by this release's own journal stops
        the release (exit 2) unless --clobber is given.
        """
        journal_path = ctx.release_dir / JOURNAL_NAME
        journal = Journal(journal_path) if ctx.resuming else None
        for binary in ctx.image_binaries():
            if not binary.image.hubs:
                raise UsageError(f"{binary.name} has an image output but no image.hubs to push to")
            images = ctx.variant_image_tags(binary)
            for text in binary.image.hubs:
                hub = parse_hub(text)
                repo = hub.repository(binary.name)
                try:
                    client = ctx.registry_for(hub.host)
                    client.ping()
                    pushed = journal_digests(journal, text, binary.name)
                    clashes = tuple(
                        clash
                        for variant, tags in images.items()
                        for clash in find_clashes(
                            client, binary, text, tags, pushed=pushed, variant=variant
                        )
                    )
                    if not ctx.options.dry_run:
                        client.check_push(repo)  # pull access is not enough to release
                except RegistryError as exc:
                    raise UsageError(
                        f"hub {text}: {exc.detail}; log in (docker login {hub.host}) or set "
                        "SHIPYARD_REGISTRY_USER/SHIPYARD_REGISTRY_PASSWORD"
                    ) from None
                if clashes and ctx.options.clobber:
                    for clash in clashes:
                        ctx.on_step(f"--clobber: {clash.reference} ({clash.digest}) will move")
                elif clashes:
                    raise clash_error(clashes, ctx.stamp.tag)

    def _index(self, ctx: ReleaseContext) -> None:
        if not any(a.kind == "wheel" for a in ctx.plan.actions):
            return
        if "wheel" not in {o for b in ctx.plan.binaries for o in b.outputs}:
            return  # wheels built only as inputs of zipapps and images are not published
        if ctx.index is None:
            if ctx.options.dry_run:
                return  # publish reports each wheel as staged, not uploaded
            # A release never leaves out a declared output: once its tags move the
            # version is released, and the wheels could only be uploaded by hand.
            raise UsageError(
                "wheels are to be released (a binary declares the wheel output) but no package "
                "index is set; set SHIPYARD_INDEX_URL, SHIPYARD_INDEX_USER and "
                "SHIPYARD_INDEX_PASSWORD (or pass --index-url); --dry-run and --snapshot "
                "need no index"
            )
        ctx.index.check_credentials()
