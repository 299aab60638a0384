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
on every hub as `cosign attach sbom` does (`attach_sboms`): the manifest staged
in the image's `sbom` entry, tagged `sha256-<index hex>.sbom`, one
CycloneDX JSON layer per platform (`mediatypes.CYCLONEDX_JSON`).

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

import functools
import hashlib
import json
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from shipyard._fs import sha256_file
from shipyard.errors import ShipyardError, UsageError
from shipyard.oci.remote.attach import Attachment, push_attachment
from shipyard.oci.remote.push import (
    LayoutImage,
    Publisher,
    move_tags,
    parse_hub,
    read_layout_image,
    variant_tags,
)
from shipyard.oci.remote.registry import Registry
from shipyard.release.context import ReleaseContext
from shipyard.release.index import PackageIndex
from shipyard.release.journal import JOURNAL_NAME, Journal
from shipyard.release.preflight import RELEASED_STEP
from shipyard.release.rails import check_tag_move
from shipyard.release.sbom import attachment
from shipyard.release.signing import SUMS_SIG, VerifyError

if TYPE_CHECKING:  # the check (and the provenance and crypto it reads) loads when publishing
    from shipyard.release.verification import VerifiedRelease

__all__ = [
    "NO_INDEX",
    "Publish",
    "PublishError",
    "Verify",
    "attach_sboms",
    "check_staged",
    "publish_steps",
    "verify_staged",
]


class PublishError(ShipyardError):
    """Publishing or verifying failed: what, where, and what was found instead (exit 1)."""


def _artifacts(ctx: ReleaseContext, kind: str) -> list[dict[str, Any]]:
    staged = ctx.staged or {}
    return [a for a in staged.get("artifacts", []) if a.get("kind") == kind]


def _upload_step(hub: str, art: dict[str, Any]) -> str:
    # The name older journals used for "pushed and tagged": an old journal's step
    # counts as uploaded, and its tags are checked (and found) again. A variant's
    # step names it: one equal to the default has the default's digest.
    variant = f" ({art['variant']} variant)" if art.get("variant") else ""
    return f"image {hub}/{art['binary']}@{art['digest']}{variant}"


def _tag_step(hub: str, art: dict[str, Any], tag: str) -> str:
    return f"tag {hub}/{art['binary']}:{tag}@{art['digest']}"


def _sbom_attachments(art: dict[str, Any]) -> list[dict[str, Any]]:
    """The SBOM attachments of an image entry: the index's, then each platform's."""
    about = art.get("sbom")
    return [about, *about.get("platforms", [])] if about else []


def _sbom_step(hub: str, art: dict[str, Any], about: dict[str, Any]) -> str:
    return f"sbom {hub}/{art['binary']}:{about['tag']}@{about['digest']}"


def _tag_order(staged: dict[str, Any]) -> list[tuple[dict[str, Any], str, str]]:
    """(image, hub, tag) in the order tags move: version tags everywhere, then the rest."""
    images = [a for a in staged.get("artifacts", []) if a.get("kind") == "image"]
    most = max((len(a["tags"]) for a in images), default=0)
    return [
        (art, hub, art["tags"][rank])
        for rank in range(most)
        for art in images
        if rank < len(art["tags"])
        for hub in art["hubs"]
    ]


def publish_steps(staged: dict[str, Any], *, signed: bool = False) -> list[str]:
    """The journal keys of every publish step of a staged release, in order.

    Every image on every hub by digest, their SBOMs, then (`signed`: with a signing
    key) each image's signature and attestation, then every wheel, then every tag.
    """
    steps = []
    for art in staged.get("artifacts", []):
        if art.get("kind") == "image":
            steps += [_upload_step(hub, art) for hub in art["hubs"]]
    for art in staged.get("artifacts", []):
        if art.get("kind") == "image":
            steps += [
                _sbom_step(hub, art, about)
                for about in _sbom_attachments(art)
                for hub in art["hubs"]
            ]
    for art in staged.get("artifacts", []) if signed else ():
        if art.get("kind") == "image":
            steps += [_sign_step(kind, hub, art) for hub in art["hubs"] for kind in SIGNED]
    for art in staged.get("artifacts", []):
        if art.get("kind") == "wheel":
            steps.append(f"wheel {Path(art['path']).name}")
    steps += [_tag_step(hub, art, tag) for art, hub, tag in _tag_order(staged)]
    return steps


# What a signed release attaches to each image on each hub, in this order (cosign's
# tags: sha256-<hex>.sig, the signature; .att, the provenance attestation).
SIGNED = ("sign", "attest")


def _sign_step(kind: str, hub: str, art: dict[str, Any]) -> str:
    return f"{kind} {hub}/{art['binary']}@{art['digest']}"


NO_INDEX = "no package index is set (SHIPYARD_INDEX_URL or --index-url)"


def _index(ctx: ReleaseContext) -> PackageIndex:
    if ctx.index is None:
        raise PublishError("wheels are staged but no package index is set (SHIPYARD_INDEX_URL)")
    return ctx.index


def _staged_path(folder: Path, rel: object) -> Path:
    """`folder/rel` for a relative path release.json names; never outside `folder`."""
    parts = PurePosixPath(str(rel)).parts
    if not isinstance(rel, str) or not parts or rel.startswith("/") or ".." in parts:
        raise UsageError(
            f"{folder / 'release.json'} names the path {rel!r}, outside {folder}; "
            "pass --clean to stage the release again"
        )
    return folder.joinpath(*parts)


def _changed(path: Path, found: str, expected: str) -> UsageError:
    return UsageError(
        f"{path} changed since it was staged: its digest is {found}, release.json says "
        f"{expected}; nothing was sent. Pass --clean to build and stage the release again"
    )


def _check_image(folder: Path, art: dict[str, Any]) -> LayoutImage:
    layout = _staged_path(folder, art.get("path"))
    try:
        image = read_layout_image(layout)
    except UsageError as exc:
        raise UsageError(
            f"{exc}: the staged image changed since it was staged; nothing was sent. "
            "Pass --clean to build and stage the release again"
        ) from None
    root_digest, _, root_bytes = image.root
    if root_digest != art.get("digest"):
        raise _changed(layout / "index.json", root_digest, str(art.get("digest")))
    documents = [(root_digest, root_bytes), *((d, data) for d, _, data in image.manifests)]
    for digest, data in documents:
        found = "sha256:" + hashlib.sha256(data).hexdigest()
        if found != digest:
            raise _changed(layout / "blobs" / "sha256" / digest.partition(":")[2], found, digest)
    listed = [m.get("digest") for m in art.get("manifests", [])]
    if listed and listed != [d for d, _, _ in image.manifests]:
        raise _changed(layout / "index.json", root_digest, str(art.get("digest")))
    for blob in image.blobs:
        algorithm, _, _ = blob.digest.partition(":")
        if algorithm != "sha256":
            raise UsageError(f"{blob.path}: digest {blob.digest} is not sha256; stage again")
        found = "sha256:" + sha256_file(blob.path)
        if found != blob.digest:
            raise _changed(blob.path, found, blob.digest)
    return image


def check_staged(folder: Path, staged: dict[str, Any]) -> dict[str, LayoutImage]:
    """Check every staged file against release.json; the image layouts by their path.

    Files with a `sha256` (wheels, zipapps, SBOMs) are hashed whole; image layouts
    are read and each blob and manifest hashed against its digest. A mismatch, a
    missing file or a path outside `folder` is a UsageError (exit 2) naming it.
    """
    images: dict[str, LayoutImage] = {}
    for art in staged.get("artifacts", []):
        if art.get("kind") == "image":
            images[str(art["path"])] = _check_image(folder, art)
        elif "sha256" in art:
            path = _staged_path(folder, art.get("path"))
            if not path.is_file():
                raise UsageError(
                    f"{path} is missing from the staged release; pass --clean to stage it again"
                )
            found = sha256_file(path)
            if found != art["sha256"]:
                raise _changed(path, found, str(art["sha256"]))
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


def _check_places(ctx: ReleaseContext, staged: dict[str, Any]) -> None:
    """Each image of `staged` goes to the hubs and tags the manifest gives it now."""
    selected = {b.name: b for b in ctx.image_binaries()}
    for art in staged.get("artifacts", []):
        if art.get("kind") != "image":
            continue
        name, variant = art.get("binary"), art.get("variant") or ""
        binary = selected.get(name) if isinstance(name, str) else None
        where = f"{ctx.release_dir / 'release.json'}: the image of {name!r}"
        if binary is None:
            raise UsageError(
                f"{where} is not an image this release selects; nothing was sent. Pass "
                "--clean to stage the release again"
            )
        hubs, tags = list(binary.image.hubs), list(variant_tags(ctx.image_tags(binary), variant))
        if art.get("hubs") != hubs or art.get("tags") != tags:
            raise UsageError(
                f"{where} goes to hubs {art.get('hubs')} with tags {art.get('tags')}, but the "
                f"manifest gives {hubs} with {tags}; nothing was sent. Set the variables "
                "(HUB, TAG) as when it was staged, or pass --clean to stage it again"
            )


class _Steps:
    """What wraps every publish step: the journal and the dry run.

    A step already journalled is skipped once the registry (or index) confirms it
    (`present`): the journal is outside SHA256SUMS, so whoever can write the staged
    folder can write it, and a line it holds is a hint, never proof. A dry run only
    says what it would do, and a step that succeeded is journalled; the publishers
    below only publish (as GoReleaser's publishers are wrapped by its skip and error
    handlers).
    """

    def __init__(self, ctx: ReleaseContext, journal: Journal) -> None:
        self._ctx = ctx
        self._journal = journal

    def run(
        self,
        step: str,
        would: str | Callable[[], str],
        do: Callable[[], object],
        present: Callable[[], bool] | None = None,
        **done: Any,
    ) -> None:
        """Run `do` for `step` unless journalled and `present()`; in a dry run report
        `would` instead."""
        if self._journal.done(step) and (present is None or present()):
            self._ctx.on_step(f"journalled {step}")
        elif self._journal.done(step) and not self._ctx.options.dry_run:
            self._ctx.on_step(f"journalled {step}, but not at the registry: doing it again")
            do()
        elif self._ctx.options.dry_run:
            self._ctx.on_step(would if isinstance(would, str) else would())
        else:
            do()
            self._journal.record(step, **done)


def _has(
    publisher: Publisher, hub_text: str, art: dict[str, Any], reference: str, digest: str = ""
) -> Callable[[], bool]:
    """Whether the image's repository at `hub_text` holds `reference` (a tag or digest),
    naming `digest` when given: what confirms a journalled step."""

    def present() -> bool:
        hub = parse_hub(hub_text)
        found = publisher.client(hub.host).manifest_exists(hub.repository(art["binary"]), reference)
        return found is not None and (not digest or found == digest)

    return present


def _wheel_present(ctx: ReleaseContext, art: dict[str, Any]) -> bool:
    """Whether the index serves the staged wheel `art` with its sha256."""
    return ctx.index is not None and ctx.index.sha256(Path(art["path"]).name) == art["sha256"]


def _would_upload(ctx: ReleaseContext, step: str) -> str:
    if ctx.index is None:  # a dry run needs no index (preflight stops a release without one)
        return f"would stage {step} but not upload it: {NO_INDEX}"
    return f"would upload {step} to {ctx.index.url}"


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
        steps = _Steps(ctx, Journal(folder / JOURNAL_NAME))
        publisher = Publisher(ctx.registry_for, on_step=ctx.on_step)
        self._images(ctx, steps, publisher, images)
        attach_sboms(ctx, steps, publisher)
        sign_images(ctx, steps, publisher)
        self._wheels(ctx, steps)
        self._tags(ctx, steps, publisher, images)

    def _images(
        self,
        ctx: ReleaseContext,
        steps: _Steps,
        publisher: Publisher,
        images: dict[str, LayoutImage],
    ) -> None:
        """Every image to every hub by digest; no tag moves."""
        for art in _artifacts(ctx, "image"):
            for hub_text in art["hubs"]:
                step = _upload_step(hub_text, art)
                steps.run(
                    step,
                    f"would push {step} with tags {', '.join(art['tags'])}",
                    functools.partial(
                        self._image, publisher, images, art, hub_text, clobber=ctx.options.clobber
                    ),
                    _has(publisher, hub_text, art, art["digest"], art["digest"]),
                    digest=art["digest"],
                )

    @staticmethod
    def _image(
        publisher: Publisher,
        images: dict[str, LayoutImage],
        art: dict[str, Any],
        hub_text: str,
        *,
        clobber: bool,
    ) -> None:
        binary, digest, tags = art["binary"], art["digest"], art["tags"]
        hub = parse_hub(hub_text)
        repo = hub.repository(binary)
        found = publisher.client(hub.host).manifest_exists(repo, tags[0])
        if found not in (None, digest) and not clobber:
            raise PublishError(
                f"{hub.host}/{repo}:{tags[0]} already exists with {found}, "
                f"not the staged {digest}; this version was released differently"
            )
        publisher.push(binary, images[art["path"]], [hub_text], [])

    def _wheels(self, ctx: ReleaseContext, steps: _Steps) -> None:
        """Every wheel to the package index (public at once: an index never untags).

        A dry run without an index says each wheel is staged but would not be uploaded.
        """
        wheels = _artifacts(ctx, "wheel")
        for art in wheels:
            step = f"wheel {Path(art['path']).name}"
            steps.run(
                step,
                functools.partial(_would_upload, ctx, step),
                functools.partial(self._wheel, ctx, art, step),
                functools.partial(_wheel_present, ctx, art),
                sha256=art["sha256"],
            )
        if wheels and ctx.index is None and ctx.options.dry_run:
            ctx.on_step(
                f"{len(wheels)} wheel(s) staged in {ctx.release_dir / 'wheels'} would not be "
                f"uploaded: {NO_INDEX}; without --dry-run the release stops in preflight "
                "until one is set"
            )

    @staticmethod
    def _wheel(ctx: ReleaseContext, art: dict[str, Any], step: str) -> None:
        index, name = _index(ctx), Path(art["path"]).name
        found = index.sha256(name)
        if found == art["sha256"]:
            ctx.on_step(f"have {step} on {index.url}")
        elif found is not None:
            raise PublishError(
                f"{index.url} already has {name} with sha256 {found}, not the staged "
                f"{art['sha256']}; an index never replaces a file: release a new version"
            )
        else:
            index.upload(ctx.release_dir / art["path"], art["sha256"])
            ctx.on_step(f"uploaded {step} to {index.url}")

    def _tags(
        self,
        ctx: ReleaseContext,
        steps: _Steps,
        publisher: Publisher,
        images: dict[str, LayoutImage],
    ) -> None:
        """The last phase: the version tag on every hub, then every other tag."""
        for art, hub_text, tag in _tag_order(ctx.staged or {}):
            steps.run(
                _tag_step(hub_text, art, tag),
                f"would tag {hub_text}/{art['binary']}:{tag} -> {art['digest']}",
                functools.partial(self._tag, ctx, publisher, images, art, hub_text, tag),
                _has(publisher, hub_text, art, tag, art["digest"]),
                digest=art["digest"],
            )

    @staticmethod
    def _tag(
        ctx: ReleaseContext,
        publisher: Publisher,
        images: dict[str, LayoutImage],
        art: dict[str, Any],
        hub_text: str,
        tag: str,
    ) -> None:
        hub = parse_hub(hub_text)
        client, repo = publisher.client(hub.host), hub.repository(art["binary"])
        # No-clobber, checked again now the digest is known: preflight saw the tags
        # before the build, and someone may have pushed since.
        check_tag_move(
            client,
            hub.host,
            repo,
            tag,
            art["digest"],
            movable=ctx.movable_tags(art["binary"], art.get("variant") or ""),
            clobber=ctx.options.clobber,
        )
        move_tags(client, repo, images[art["path"]].root, [tag], on_step=ctx.on_step)


def _staged_attachment(
    ctx: ReleaseContext, art: dict[str, Any], about: dict[str, Any]
) -> Attachment:
    """The SBOM attachment `about` of the image entry `art`, rebuilt from the staged
    documents; UsageError when it is not the one release.json names."""
    platforms = {a["path"]: a.get("platform", "") for a in _artifacts(ctx, "sbom")}
    folder = ctx.release_dir
    made = attachment(
        [
            (
                PurePosixPath(rel).name,
                platforms.get(rel, ""),
                _staged_path(folder, rel).read_bytes(),
            )
            for rel in about["documents"]
        ]
    )
    if made.digest != about["digest"]:
        raise UsageError(
            f"{folder / 'release.json'}: the SBOMs of {art['binary']} make the attachment "
            f"{made.digest}, not the staged {about['digest']}; pass --clean to stage again"
        )
    return made


def _attach(
    ctx: ReleaseContext,
    publisher: Publisher,
    made: Attachment,
    binary: str,
    tag: str,
    hub_text: str,
) -> None:
    hub = parse_hub(hub_text)
    try:
        push_attachment(
            publisher.client(hub.host), hub.repository(binary), tag, made, on_step=ctx.on_step
        )
    except ShipyardError as exc:
        raise PublishError(str(exc)) from None


def attach_sboms(ctx: ReleaseContext, steps: _Steps, publisher: Publisher) -> None:
    """Each image's SBOMs next to it on every hub, as `cosign attach sbom` does.

    In the image's repository: `sha256-<index hex>.sbom`, a manifest with one
    CycloneDX layer per platform, and `sha256-<platform manifest hex>.sbom` with
    that platform's one (as ko attaches them; `cosign download sbom --platform`
    reads these). Staged in the image entry's `sbom`; each rebuilt from the staged
    documents and checked against it. Journalled per hub and tag; a tag already
    naming the same manifest is success (nothing is pushed).
    """
    for art in _artifacts(ctx, "image"):
        for about in _sbom_attachments(art):
            made = _staged_attachment(ctx, art, about)
            for hub_text in art["hubs"]:
                step = _sbom_step(hub_text, art, about)
                steps.run(
                    step,
                    f"would attach {step}",
                    functools.partial(
                        _attach, ctx, publisher, made, art["binary"], about["tag"], hub_text
                    ),
                    _has(publisher, hub_text, art, about["tag"], made.digest),
                    digest=made.digest,
                )


def sign_images(ctx: ReleaseContext, steps: _Steps, publisher: Publisher) -> None:
    """With a signing key: each image on every hub signed (`sha256-<hex>.sig`) and, when
    the release staged a provenance, attested (`.att`), as cosign does; after the
    images and their SBOMs, before any tag moves. Journalled per hub and image; an
    attachment already there with the same bytes is success."""
    key = ctx.signing_key
    if key is None:
        return
    from shipyard.release.provenance import push_attestation
    from shipyard.release.signing import attached_tag, push_signature

    envelopes = ctx.provenance
    for art in _artifacts(ctx, "image"):
        for hub_text in art["hubs"]:
            hub = parse_hub(hub_text)
            client, repo = publisher.client(hub.host), hub.repository(art["binary"])
            digest = art["digest"]
            step = _sign_step("sign", hub_text, art)
            steps.run(
                step,
                f"would sign {hub.host}/{repo}@{digest} ({key.source})",
                functools.partial(push_signature, client, repo, digest, key, on_step=ctx.on_step),
                _has(publisher, hub_text, art, attached_tag(digest, "sig")),
                digest=digest,
            )
            for envelope in envelopes:
                step = _sign_step("attest", hub_text, art)
                steps.run(
                    step,
                    f"would attach the provenance to {hub.host}/{repo}@{digest}",
                    functools.partial(
                        push_attestation, client, repo, digest, envelope, on_step=ctx.on_step
                    ),
                    _has(publisher, hub_text, art, attached_tag(digest, "att")),
                    digest=digest,
                )


# A step the journal says is done but the registry lacks: the journal is wrong.
_JOURNAL_HINT = (
    "; if publish.journal records it as done, the journal is wrong: empty it (`: > "
    "publish.journal`) and run the release again (every step checks the registry "
    "first, nothing is sent twice)"
)


def _verify_signed(ctx: ReleaseContext, client: Registry, repo: str, digest: str) -> None:
    """The image's signature verifies, and its attestation is there and verifies when
    the release has provenance: a signed release never ends without either."""
    from shipyard.release.provenance import verify_image_attestation
    from shipyard.release.signing import VerifyError, verify_image_signature

    assert ctx.signing_key is not None
    public = ctx.signing_key.public
    try:
        verify_image_signature(client, repo, digest, public)
        if ctx.provenance and verify_image_attestation(client, repo, digest, public) is None:
            raise VerifyError(f"{client.host}/{repo}@{digest} has no attestation (.att)")
    except VerifyError as exc:
        raise PublishError(f"{exc}{_JOURNAL_HINT}") from None


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
                for about in _sbom_attachments(art):
                    found = client.manifest_exists(repo, about["tag"])
                    if found != about["digest"]:
                        raise PublishError(
                            f"{hub.host}/{repo}:{about['tag']} is {found}, release.json says "
                            f"{about['digest']}{_JOURNAL_HINT}"
                        )
                if ctx.signing_key is not None:
                    _verify_signed(ctx, client, repo, art["digest"])
                ctx.on_step(f"verified {hub.host}/{repo} {', '.join(art['tags'])}")
        for art in _artifacts(ctx, "wheel"):
            name = Path(art["path"]).name
            found = _index(ctx).sha256(name)
            if found != art["sha256"]:
                raise PublishError(f"the index serves {name} as {found}, expected {art['sha256']}")
            ctx.on_step(f"verified wheel {name}")
        Journal(ctx.release_dir / JOURNAL_NAME).record(RELEASED_STEP, version=ctx.stamp.version)
