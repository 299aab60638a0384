"""The publish and verify stages: push what was staged, then pull it back and compare.

Publish works from dist/release/<version>/ alone, in three phases, so that a
failure part-way never leaves a partly public release behind a tag:

1. the staged folder passes the check `shipyard verify` and promote run
   (`verification.check_release`: no symlink, every file against SHA256SUMS and
   none unlisted, release.json against them, with a key the signature and the
   provenance), then every image layout is read and each blob and manifest
   hashed against its digest; a mismatch stops the release with exit 2 naming
   the file, before anything is sent;
2. every image goes to every hub by digest (blobs, platform manifests, the
   index), then every wheel goes to the package index;
3. only when all of that succeeded do tags move: the version tag on every hub,
   then the other tags (`latest`) on every hub.

Between the images and the wheels, each image's SBOMs are attached next to it
on every hub as `cosign attach sbom` does: the manifest staged in the image's
`sbom` entry, tagged `sha256-<index hex>.sbom`, one CycloneDX JSON layer per
platform (`mediatypes.CYCLONEDX_JSON`). The steps themselves are
`publishers.PUBLISHERS`, the list promote runs too: here the source is the
staged layouts and the targets the hubs release.json names.

An image variant is one more image entry of release.json (`variant`, its tags
suffixed `-<variant>`): pushed, tagged and verified like the default, its
version tag (`1.4.0-debug`) moving with the other version tags. A variant equal
to the default (`collapsed`) has the default's digest: nothing is uploaded
again, only its tags move.

What holds: a failure in phases 1-2 leaves no tag of the new version on any hub
(content pushed by digest is invisible to anyone who pulls by tag). Wheels are
public once uploaded (an index cannot take a file back), so they go after the
images, which fail more often, and before the tags. A failure inside phase 3
(after every upload succeeded, only tag PUTs left) can leave some tags moved;
re-running the release finishes it. Every finished step goes into the journal;
a re-run skips journalled steps, and the registry's and index's own existence
checks catch a step that finished just before a crash. Something already there
with the same digest is success; with another digest, an error.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard._fs import sha256_file
from shipyard.errors import ShipyardError, UsageError
from shipyard.oci.remote.push import LayoutImage, Publisher, read_layout_image, variant_tags
from shipyard.release.attachments import staged_attachments
from shipyard.release.context import ReleaseContext
from shipyard.release.journal import Journal
from shipyard.release.keys import VerifyError
from shipyard.release.preflight import RELEASED_STEP
from shipyard.release.published import verify_published
from shipyard.release.publishers import (
    NO_INDEX,
    Job,
    Placement,
    Runner,
    publish_all,
    step_keys,
)
from shipyard.release.staged import (
    JOURNAL,
    RELEASE_JSON,
    SUMS_SIG,
    StagedImage,
    StagedRelease,
    inside,
)

if TYPE_CHECKING:  # the check (and the provenance and crypto it reads) loads when publishing
    from shipyard.release.verification import VerifiedRelease

__all__ = [
    "NO_INDEX",
    "LayoutSource",
    "Publish",
    "PublishError",
    "Verify",
    "check_staged",
    "publish_job",
    "publish_steps",
    "verify_staged",
]


class PublishError(ShipyardError):
    """Publishing or verifying failed: what, where, and what was found instead (exit 1)."""


# A step the journal says is done but the registry lacks: the journal is wrong.
_JOURNAL_HINT = (
    "; if publish.journal records it as done, the journal is wrong: empty it (`: > "
    "publish.journal`) and run the release again (every step checks the registry "
    "first, nothing is sent twice)"
)


def _changed(path: Path, found: str, expected: str) -> UsageError:
    return UsageError(
        f"{path} changed since it was staged: its digest is {found}, release.json says "
        f"{expected}; nothing was sent. Pass --clean to build and stage the release again"
    )


def _check_image(folder: Path, art: StagedImage) -> LayoutImage:
    layout = inside(folder, art.path)
    try:
        image = read_layout_image(layout)
    except UsageError as exc:
        raise UsageError(
            f"{exc}: the staged image changed since it was staged; nothing was sent. "
            "Pass --clean to build and stage the release again"
        ) from None
    root_digest, _, root_bytes = image.root
    if root_digest != art.digest:
        raise _changed(layout / "index.json", root_digest, art.digest)
    documents = [(root_digest, root_bytes), *((d, data) for d, _, data in image.manifests)]
    for digest, data in documents:
        found = "sha256:" + hashlib.sha256(data).hexdigest()
        if found != digest:
            raise _changed(layout / "blobs" / "sha256" / digest.partition(":")[2], found, digest)
    listed = [m.digest for m in art.manifests]
    if listed and listed != [d for d, _, _ in image.manifests]:
        raise _changed(layout / "index.json", root_digest, art.digest)
    for blob in image.blobs:
        algorithm, _, _ = blob.digest.partition(":")
        if algorithm != "sha256":
            raise UsageError(f"{blob.path}: digest {blob.digest} is not sha256; stage again")
        found = "sha256:" + sha256_file(blob.path)
        if found != blob.digest:
            raise _changed(blob.path, found, blob.digest)
    return image


def check_staged(folder: Path, staged: StagedRelease) -> dict[str, LayoutImage]:
    """Check every staged file against release.json; the image layouts by their path.

    Files (wheels, zipapps, SBOMs) are hashed whole; image layouts are read and
    each blob and manifest hashed against its digest. A mismatch, a missing file or
    a path outside `folder` is a UsageError (exit 2) naming it.
    """
    images = {art.path: _check_image(folder, art) for art in staged.images}
    for art in staged.listed():
        if isinstance(art, StagedImage):
            continue
        path = inside(folder, art.path)
        if not path.is_file():
            raise UsageError(
                f"{path} is missing from the staged release; pass --clean to stage it again"
            )
        found = sha256_file(path)
        if found != art.sha256:
            raise _changed(path, found, art.sha256)
    return images


def verify_staged(ctx: ReleaseContext) -> VerifiedRelease:
    """The staged folder through the check `shipyard verify` and promote run; what it
    checked (release.json and the provenance, as the bytes it read hold them).

    With a signing key the folder must be signed by it (a resumed publish signs
    images only for a release its key signed); a mismatch, an unlisted or missing
    file, a symlink or another version's folder is a UsageError (exit 2) naming it,
    before anything is sent. So is an image release.json sends to hubs or tags the
    manifest does not give it now: publish pushes, with the push credentials, only
    where the manifest says (a folder must not choose where the credentials go).
    """
    from shipyard.release.verification import check_release

    folder, key = ctx.release_dir, ctx.signing_key
    if (folder / SUMS_SIG).exists() and key is None:
        raise UsageError(
            f"{folder} was staged signed ({SUMS_SIG}), but no signing key is given; "
            "nothing was sent. Pass the same --signing-key (or SHIPYARD_SIGNING_KEY), "
            "or --clean to stage the release again unsigned"
        )
    try:
        verified = check_release(
            folder,
            public=key.public if key is not None else None,
            version=ctx.stamp.version,
            require_signed=key is not None,
        )
    except VerifyError as exc:
        raise UsageError(
            f"{exc}: the staged release changed since it was staged; nothing was sent. "
            "Pass --clean to build and stage the release again"
        ) from None
    _check_places(ctx, verified.staged)
    return verified


def _check_places(ctx: ReleaseContext, staged: StagedRelease) -> None:
    """Each image of `staged` goes to the hubs and tags the manifest gives it now."""
    selected = {b.name: b for b in ctx.image_binaries()}
    for art in staged.images:
        binary = selected.get(art.binary)
        where = f"{ctx.release_dir / RELEASE_JSON}: the image of {art.binary!r}"
        if binary is None:
            raise UsageError(
                f"{where} is not an image this release selects; nothing was sent. Pass "
                "--clean to stage the release again"
            )
        hubs = tuple(binary.image.hubs)
        tags = tuple(variant_tags(ctx.image_tags(binary), art.variant))
        if art.hubs != hubs or art.tags != tags:
            raise UsageError(
                f"{where} goes to hubs {list(art.hubs)} with tags {list(art.tags)}, but the "
                f"manifest gives {list(hubs)} with {list(tags)}; nothing was sent. Set the "
                "variables (HUB, TAG) as when it was staged, or pass --clean to stage it again"
            )


class LayoutSource:
    """The publish source: each image's bytes from its staged, checked layout."""

    def __init__(self, images: dict[str, LayoutImage], clients: Publisher) -> None:
        self._images = images
        self._clients = clients

    def would(self, place: Placement) -> str:
        """`would push image ...` with the tags that will move."""
        image = place.image
        variant = f" ({image.variant} variant)" if image.variant else ""
        step = f"image {place.hub_text}/{image.binary}@{image.digest}{variant}"
        return f"would push {step} with tags {', '.join(image.tags)}"

    def push(self, place: Placement) -> None:
        """Blobs, platform manifests and the index by digest; no tag."""
        self._clients.push(place.image.binary, self._images[place.image.path], [place.hub_text], [])

    def root(self, place: Placement) -> tuple[str, str, bytes]:
        """The staged layout's index: what every tag names."""
        return tuple(self._images[place.image.path].root)  # type: ignore[return-value]


def publish_job(
    ctx: ReleaseContext, staged: StagedRelease, source: LayoutSource, clients: Publisher
) -> Job:
    """The publishers' job: the hubs release.json names, from the staged layouts."""
    places = tuple(
        Placement(image, hub, ctx.movable_tags(image.binary, image.variant))
        for image in staged.images
        for hub in image.hubs
    )
    return Job(
        release=staged,
        folder=ctx.release_dir,
        places=places,
        source=source,
        clients=clients,
        index=ctx.index,
        key=ctx.signing_key,
        envelopes=ctx.provenance,
        clobber=ctx.options.clobber,
        on_step=ctx.on_step,
        error=PublishError,
        hint=_JOURNAL_HINT,
    )


def publish_steps(staged: StagedRelease, *, signed: bool = False) -> list[str]:
    """The journal keys of every publish step of a staged release, in order.

    Every image on every hub by digest, their SBOMs, then (`signed`: with a signing
    key) each image's signature and attestation, then every wheel, then every tag.
    """
    places = tuple(Placement(image, hub) for image in staged.images for hub in image.hubs)
    clients = Publisher()
    job = Job(
        staged,
        Path(),
        places,
        LayoutSource({}, clients),
        clients,
        None,
        None,
        (b"",) if signed else (),
        False,
        lambda _: None,
        PublishError,
        signed=signed,
    )
    return step_keys(job)


class Publish:
    """Images to every hub by digest, wheels to the index, then all tags; journalled."""

    name = "publish"

    def skip(self, ctx: ReleaseContext) -> str | None:
        """Snapshots publish nothing."""
        return "snapshot: nothing is published" if ctx.options.snapshot else None

    def run(self, ctx: ReleaseContext) -> None:
        """Publish each step not yet journalled; in a dry run, only report each step."""
        folder = ctx.release_dir
        # What is published is what was checked: release.json and the provenance as
        # the check read them, never read from the folder again.
        verified = verify_staged(ctx)
        ctx.staged, ctx.provenance = verified.staged, verified.provenance
        images = check_staged(folder, ctx.staged)
        clients = Publisher(ctx.registry_for, on_step=ctx.on_step)
        job = publish_job(ctx, ctx.staged, LayoutSource(images, clients), clients)
        job.attachments = staged_attachments(folder, ctx.staged, UsageError)
        publish_all(job, Runner(Journal(folder / JOURNAL), ctx.options.dry_run, ctx.on_step))
        wheels = ctx.staged.wheels
        if wheels and ctx.index is None and ctx.options.dry_run:
            ctx.on_step(
                f"{len(wheels)} wheel(s) staged in {folder / 'wheels'} would not be "
                f"uploaded: {NO_INDEX}; without --dry-run the release stops in preflight "
                "until one is set"
            )


class Verify:
    """Pulls every tag and wheel back and compares digests with release.json; with a
    key, every signature and attestation too, and every SBOM attachment: whatever the
    journal says was done is checked at the registry."""

    name = "verify"

    def skip(self, ctx: ReleaseContext) -> str | None:
        """Nothing to verify when nothing was published."""
        if ctx.options.snapshot:
            return "snapshot: nothing was published"
        return "dry run: nothing was published" if ctx.options.dry_run else None

    def run(self, ctx: ReleaseContext) -> None:
        """Raise PublishError naming the first mismatch; journal the release as done."""
        assert ctx.staged is not None
        clients = Publisher(ctx.registry_for)
        verify_published(publish_job(ctx, ctx.staged, LayoutSource({}, clients), clients))
        Journal(ctx.release_dir / JOURNAL).record(RELEASED_STEP, version=ctx.stamp.version)
