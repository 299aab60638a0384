"""Promotion: a staged release copied by digest from a staging hub to the final places.

Istio publishes a release to a staging location, tests it there, then copies the
very same artifacts to the official one. `promote` does that for a release staged
in dist/release/<version>/ and published to a staging hub: nothing is built (this
module imports neither the build engine nor the builders), and every image lands
byte for byte, so each digest in release.json is the digest at the final hub.

The order, so that no tag ever names something unchecked or incomplete:

1. local checks (exit 2): release.json, the staged wheels against it, the final
   hubs of each image (the manifest's `image.hubs` as expanded now, minus the
   staging hub; `--to` overrides), protected hubs (`rails.check_protected`: only
   from CI or with --force-protected), a package index for wheels;
2. remote checks, read-only: each image's version tag at the staging hub must
   name release.json's digest and its index must list the platform manifests
   release.json lists (exit 1); no final hub may hold a tag of the release on
   another digest unless the tag is movable (no-clobber, `rails.find_clashes`:
   exit 2, or --clobber); no wheel may be on the index with other bytes (exit 1);
   push access to every final repository and the index credentials are checked
   (exit 2 when refused);
3. every image copied to every final hub by digest: blobs (mounted across
   repositories on the same registry host, else uploaded from the staged layout,
   or downloaded from the staging hub when the layout lacks them), then platform
   manifests, then the index, with the bytes the staging hub served;
4. each image's SBOMs attached next to it at every final hub, as release publish
   attaches them (`sha256-<hex>.sbom`, rebuilt from the staged documents and
   checked against the image entry's `sbom` in release.json); with a signing key,
   each image signed at every final hub (`sha256-<hex>.sig`: cosign's payload
   names the final repository, so a staging signature cannot be copied) and the
   staged provenance envelope attached as it is (`sha256-<hex>.att`: it names
   digests, not repositories);
5. every staged wheel uploaded to the package index;
6. the tags: the version tag on every hub first, then the others (`latest`),
   each checked again just before it moves (`rails.check_tag_move`);
7. verify: every tag at every final hub names release.json's digest, every
   platform manifest and SBOM attachment is there, with a key every image's
   signature verifies, and the index serves each wheel's sha256.

A release staged signed (SHA256SUMS.sig) is promoted only with a signing key, and
only with the key that signed it (exit 2 otherwise, before anything is sent): a
promotion never drops the signatures the release had.

Every step checks before it writes and skips what is there already, so a second
run (or a run after a failure) finishes the promotion and changes nothing else.
A dry run does the read-only checks of 2 and reports each write it would make;
a protected hub is then a note, not a refusal, as in `release --dry-run`.

Steps 3-7 are the publishers release publish runs (`publishers.PUBLISHERS`,
`publishers.verify_published`), with the staging hub as their source
(`copier.HubSource`) and the final hubs as their targets.

Image variants are more image entries of release.json (`variant`, tags suffixed
`-<variant>`): each is copied and tagged like the default image, its movable
tags suffixed too (`latest-debug`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from shipyard._fs import sha256_file
from shipyard.dist import dist_dir, release_dir, temp_prefix
from shipyard.errors import UsageError
from shipyard.manifest import Binary, Image, Manifest
from shipyard.oci.remote.push import Hub, Publisher, default_registry, parse_hub, variant_tags
from shipyard.oci.remote.registry import Registry
from shipyard.release.attachments import staged_attachments
from shipyard.release.copier import (
    HubSource,
    ImageCopy,
    Promoted,
    PromotionError,
    SbomAttachment,
    check_index,
    check_source,
    check_targets,
)
from shipyard.release.index import PackageIndex
from shipyard.release.keys import SigningKey, VerifyError, verify_sums
from shipyard.release.published import verify_published
from shipyard.release.publishers import (
    Counts,
    Job,
    Runner,
    StepLog,
    publish_all,
)
from shipyard.release.rails import check_protected, refused_hubs
from shipyard.release.staged import (
    RELEASE_JSON,
    SUMS,
    SUMS_SIG,
    StagedFile,
    StagedRelease,
    inside,
)
from shipyard.release.verification import VerifiedRelease, check_release

__all__ = [
    "ImageCopy",
    "PromoteOptions",
    "Promoted",
    "Promotion",
    "PromotionError",
    "PromotionResult",
    "SbomAttachment",
    "check_signing_key",
    "plan_promotion",
    "promote",
]


@dataclass(frozen=True)
class PromoteOptions:
    """What the user asked of a promotion (the CLI flags)."""

    source: str  # --from: the staging hub, host[:port]/path
    version: str  # the staged release, dist/release/<version>
    to: tuple[str, ...] = ()  # --to: the final hubs for every image (default: image.hubs)
    dry_run: bool = False
    force_protected: bool = False
    clobber: bool = False  # move tags that no-clobber protects


@dataclass(frozen=True)
class Promotion:
    """Everything a promotion will do, decided from local facts only (no network)."""

    version: str
    folder: Path  # dist/release/<version>
    images: tuple[ImageCopy, ...]
    wheels: tuple[StagedFile, ...]
    # Each binary with an image, its image.hubs the final hubs: what the rails check.
    binaries: Mapping[str, Binary] = field(default_factory=dict)
    clobber: bool = False
    notes: tuple[str, ...] = ()  # told before a dry run's steps (a protected hub)
    signed: bool = False  # staged signed (SHA256SUMS.sig): promoted only with the key
    envelopes: tuple[bytes, ...] = ()  # the staged provenance (provenance.intoto.jsonl)
    # The public key (PEM) the folder was checked with when planned; b"" for none.
    checked_with: bytes = b""
    release: StagedRelease | None = None  # release.json, as the check read it

    def tag_order(self) -> list[tuple[ImageCopy, str]]:
        """(image, tag) in the order tags move: the version tag everywhere, then the rest."""
        most = max((len(i.tags) for i in self.images), default=0)
        return [(i, i.tags[r]) for r in range(most) for i in self.images if r < len(i.tags)]


@dataclass
class PromotionResult(Counts):
    """What a promotion did: counts per step outcome, and what is where now."""

    images: list[Promoted] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """The result as JSON for `--json`."""
        return asdict(self)


# -- 1. local: what to do, from release.json, the staged files and the manifest -----------


def _read_staged(folder: Path, version: str, key: SigningKey | None) -> VerifiedRelease:
    """The staged release in `folder`, through the check `shipyard verify` runs.

    UsageError (exit 2) when there is none, it is a snapshot, or the key does not
    fit it (`_check_key`); PromotionError (exit 1) when the folder is not what was
    staged and signed: a file changed, added or removed, release.json or the
    provenance rewritten, a symlink planted, another version's folder.
    """
    path = folder / RELEASE_JSON
    if not path.is_file() and not path.is_symlink():
        raise UsageError(
            f"no staged release of {version}: {path} does not exist; promote copies a release "
            f"staged and published to the staging hub: run `shipyard release --version={version}` "
            "with HUB set to the staging hub first (here, or copy its dist/release folder here)"
        )
    _check_key(folder, (folder / SUMS_SIG).exists() or (folder / SUMS_SIG).is_symlink(), key)
    try:
        verified = check_release(
            folder,
            public=key.public if key is not None else None,
            version=version,
            require_signed=key is not None,
        )
    except VerifyError as exc:
        raise PromotionError(
            f"{exc}; nothing was promoted: the staged release is not what was staged"
            + (" and signed" if key is not None else "")
            + ". Stage and publish it again, and find out who changed it"
        ) from None
    if verified.staged.snapshot:
        raise UsageError(
            f"{path} is a snapshot: a snapshot is never published, so there is nothing at a "
            f"staging hub to promote; release it with `shipyard release --version={version}`"
        )
    return verified


def _wheels(folder: Path, staged: StagedRelease) -> tuple[StagedFile, ...]:
    """The staged wheels, each checked against release.json."""
    for wheel in staged.wheels:
        path = inside(folder, wheel.path)
        if not path.is_file():
            raise UsageError(f"{path} is missing from the staged release; stage it again")
        found = sha256_file(path)
        if found != wheel.sha256:
            raise UsageError(
                f"{path} changed since it was staged: its sha256 is {found}, release.json says "
                f"{wheel.sha256}; nothing was promoted. Stage the release again"
            )
    return staged.wheels


def _targets(binary: Binary, source: Hub, options: PromoteOptions, where: Path) -> list[Hub]:
    """The final hubs of `binary`: --to, else its image.hubs minus the staging hub."""
    if options.to:
        hubs = [parse_hub(text) for text in options.to]
        for hub in hubs:
            if hub == source:
                raise UsageError(f"--to {hub} is the staging hub (--from); name a final hub")
    else:
        hubs = [h for h in map(parse_hub, binary.image.hubs) if h != source]
        if not hubs:
            raise UsageError(
                f"{binary.name}: image.hubs in {where} expands to only the staging hub "
                f"{source} ({', '.join(binary.image.hubs) or 'none'}); unset the variable that "
                "points it there (e.g. HUB) or pass --to HUB"
            )
    return list(dict.fromkeys(hubs))


def _final_binary(binary: Binary, hubs: list[Hub]) -> Binary:
    """`binary` as the rails see it: its image.hubs the final hubs, each written as
    image.protected writes it when it is one of those (the rails compare text)."""
    protected = {parse_hub(text): text for text in binary.image.protected}
    texts = tuple(protected.get(hub, str(hub)) for hub in hubs)
    return replace(binary, image=replace(binary.image, hubs=texts))


def _image_copies(
    manifest: Manifest, options: PromoteOptions, folder: Path, staged: StagedRelease
) -> tuple[list[ImageCopy], dict[str, Binary]]:
    source = parse_hub(options.source)
    attachments = staged_attachments(folder, staged, UsageError)
    copies: list[ImageCopy] = []
    binaries: dict[str, Binary] = {}
    for image in staged.images:
        declared = manifest.binaries.get(image.binary)
        if declared is None and not options.to:
            raise UsageError(
                f"{folder / RELEASE_JSON} has an image of {image.binary}, which "
                f"{manifest.path} does not declare (renamed or removed since it was staged); "
                "pass --to HUB for its final hubs"
            )
        # With --to, a binary the manifest lost gets a stand-in: the defaults' rails.
        final = declared or Binary(image.binary, Path(), "", ("image",), (), (), Image(), ())
        hubs = _targets(final, source, options, manifest.path)
        final = binaries.setdefault(image.binary, _final_binary(final, hubs))
        movable = variant_tags(final.image.movable_tags, image.variant)
        sboms = tuple(SbomAttachment(s.tag, attachments[s.digest]) for s in image.sboms)
        layout = inside(folder, image.path)
        copies += [ImageCopy(image, source, hub, movable, layout, sboms) for hub in hubs]
    return copies, binaries


def plan_promotion(
    manifest: Manifest,
    options: PromoteOptions,
    env: Mapping[str, str],
    signing_key: SigningKey | None = None,
) -> Promotion:
    """What promoting `options.version` from `options.source` does; touches no network.

    The staged folder first passes the check `shipyard verify` runs
    (`verification.check_release`, with `signing_key`'s public half when given), and
    the plan is made from the bytes it checked. Raises PromotionError (exit 1) when
    the folder is not what was staged (and signed), UsageError (exit 2) for a
    missing release or a key that does not fit it, an image with no final hub, or a
    protected hub outside CI without --force-protected (a dry run notes it instead).
    """
    source = parse_hub(options.source)
    if not source.path:
        raise UsageError(
            f"--from {options.source}: name the staging hub as the release's image.hubs "
            "names it, host[:port]/path (e.g. 127.0.0.1:5000/staging)"
        )
    folder = release_dir(dist_dir(manifest.root), options.version)
    verified = _read_staged(folder, options.version, signing_key)
    staged = verified.staged
    images, binaries = _image_copies(manifest, options, folder, staged)
    wheels = _wheels(folder, staged)
    if not images and not wheels:
        raise UsageError(f"{folder / RELEASE_JSON} lists no image and no wheel to promote")
    force = options.force_protected
    if not options.dry_run:
        check_protected(binaries.values(), env, force=force, command="promote")
    notes = tuple(
        f"note: {r.binary} -> {r.hub} is a protected hub: a promotion outside CI stops "
        "here without --force-protected"
        for r in refused_hubs(binaries.values(), env, force=force)
    )
    envelopes = verified.provenance  # the checked bytes, never read again
    return Promotion(
        options.version,
        folder,
        tuple(images),
        wheels,
        binaries,
        options.clobber,
        notes,
        signed=verified.signed,
        envelopes=envelopes,
        checked_with=_fingerprint(signing_key),
        release=staged,
    )


def _fingerprint(key: SigningKey | None) -> bytes:
    return key.public_pem() if key is not None else b""


def check_signing_key(promotion: Promotion, key: SigningKey | None) -> None:
    """A release is promoted with a signing key only if that key signed it.

    UsageError (exit 2) when the release folder has SHA256SUMS.sig and no key is
    given (a promotion must not drop the signatures), when the key given does not
    verify SHA256SUMS.sig (another key), or when a key is given for a release staged
    unsigned (the key would vouch for images nobody signed). Local only.
    """
    _check_key(promotion.folder, promotion.signed, key)


def _check_key(folder: Path, signed: bool, key: SigningKey | None) -> None:
    sig = folder / SUMS_SIG
    if signed and key is None:
        raise UsageError(
            f"{folder} was staged signed ({SUMS_SIG}), but no signing key is given; "
            "nothing was sent. Pass the key that signed the release, --signing-key PATH (or "
            "SHIPYARD_SIGNING_KEY): a promotion must not drop the release's signatures"
        )
    if not signed and key is not None:
        raise UsageError(
            f"{folder} was staged unsigned (no {SUMS_SIG}), but a signing key is given "
            f"({key.source}); nothing was sent. A key signs at the final hubs only what it "
            "signed when the release was staged: stage the release signed, or promote it "
            "without a key (unset SHIPYARD_SIGNING_KEY)"
        )
    if signed and key is not None:
        try:
            verify_sums(folder, key.public)
        except VerifyError as exc:
            raise UsageError(
                f"{key.source}: not the key that signed the release, or {SUMS} was changed "
                f"since ({exc}); nothing was sent. Pass the key that signed {sig}"
            ) from None


# -- 2-7. remote: check, then the publishers with the staging hub as their source --------


def _need_index(index: PackageIndex | None, promotion: Promotion, dry_run: bool) -> None:
    """Staged wheels need a package index; known before any network is used."""
    if promotion.wheels and index is None and not dry_run:
        raise UsageError(
            f"the release has {len(promotion.wheels)} wheel(s) to promote but no package index "
            "is set; set SHIPYARD_INDEX_URL, SHIPYARD_INDEX_USER and SHIPYARD_INDEX_PASSWORD "
            "(or pass --index-url)"
        )


def _job(
    promotion: Promotion,
    copier: HubSource,
    index: PackageIndex | None,
    key: SigningKey | None,
    on_step: StepLog,
) -> Job:
    """The publishers' job: the final hubs, from the staging hub."""
    assert promotion.release is not None
    return Job(
        release=promotion.release,
        folder=promotion.folder,
        places=tuple(image.placement for image in promotion.images),
        source=copier,
        clients=copier.clients,
        index=index,
        key=key,
        envelopes=promotion.envelopes if key is not None else (),
        clobber=promotion.clobber,
        on_step=on_step,
        error=PromotionError,
        counts=copier.result,
        attachments={s.digest: s.made for i in promotion.images for s in i.sboms},
    )


def promote(
    promotion: Promotion,
    *,
    index: PackageIndex | None,
    registry_for: Callable[[str], Registry] = default_registry,
    dry_run: bool = False,
    signing_key: SigningKey | None = None,
    on_step: StepLog = lambda _: None,
) -> PromotionResult:
    """Copy the images, attach their SBOMs, sign them (with `signing_key`), upload the
    wheels, move the tags, verify; see the module's doc.

    Before anything is sent: UsageError (exit 2) when the release was staged signed
    and `signing_key` is None or not its key (`check_signing_key`), or wheels are
    staged and no index is set. Before anything is written: PromotionError (exit 1)
    when the staging hub or the index holds something other than release.json says;
    UsageError (exit 2) when a final hub holds a tag of the release on another image
    that may not move (no-clobber, without --clobber) or refuses these credentials.
    TagClobberError (exit 1) when such a tag appears between those checks and its move.
    """
    check_signing_key(promotion, signing_key)
    if _fingerprint(signing_key) != promotion.checked_with:
        # Planned with another key (or none): the folder is checked again with this one.
        _read_staged(promotion.folder, promotion.version, signing_key)
    _need_index(index, promotion, dry_run)
    clients = Publisher(registry_for)
    result = PromotionResult()
    dist = promotion.folder.parent.parent
    dist.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dist, prefix=temp_prefix("promote")) as scratch:
        copier = HubSource(clients, Path(scratch), on_step, promotion.images, result)
        check_source(copier, promotion.images, promotion.version, on_step)
        check_targets(
            copier,
            promotion.images,
            promotion.binaries,
            clobber=promotion.clobber,
            dry_run=dry_run,
            on_step=on_step,
        )
        check_index(index, promotion.wheels, dry_run)
        job = _job(promotion, copier, index, signing_key, on_step)
        for note in promotion.notes if dry_run else ():
            on_step(note)
        publish_all(job, Runner(None, dry_run, on_step))
        if not dry_run:
            verify_published(job)
            result.images += [image.promoted() for image in promotion.images]
        return result
