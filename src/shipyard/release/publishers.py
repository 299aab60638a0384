"""Publishing a staged release: one list of small publishers under one runner.

Each publisher only publishes: it turns a `Job` (the staged release, where each
image goes, where its bytes come from) into `Step`s, each with its journal key,
what a dry run says, what it does, and how to see that it is already done. The
`Runner` wraps every step the same way, as GoReleaser wraps its publishers in
its skip, log and error handlers: the journal, the dry run, the already-there
check and the log line. `release` (publish) and `promote` run the same list,
`PUBLISHERS`, and differ only in their source (the staged layouts, or the
staging hub) and their targets (the hubs release.json names, or the final
hubs); ko's MultiPublisher is the `Placement` per hub. `published.verify_published`
is the check both end with.

The order is the publish contract: every image on every hub by digest, their
SBOMs, their signatures and attestations, the wheels, and only then the tags
(each image's version tag everywhere first), so that no tag names anything
incomplete.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from shipyard.errors import ShipyardError
from shipyard.oci.remote.attach import Attachment, attached_tag, push_attachment
from shipyard.oci.remote.push import Hub, Publisher, parse_hub
from shipyard.oci.remote.registry import Registry
from shipyard.release.index import PackageIndex
from shipyard.release.journal import Journal
from shipyard.release.rails import check_tag_move
from shipyard.release.staged import ImageSbom, StagedFile, StagedImage, StagedRelease, inside

if TYPE_CHECKING:
    from shipyard.release.keys import SigningKey

__all__ = [
    "NO_INDEX",
    "PUBLISHERS",
    "Counts",
    "ImageSource",
    "Job",
    "Placement",
    "Runner",
    "Step",
    "publish_all",
    "step_keys",
]

StepLog = Callable[[str], None]
NO_INDEX = "no package index is set (SHIPYARD_INDEX_URL or --index-url)"
# What a signed release attaches to each image on each hub, in this order (cosign's
# tags: sha256-<hex>.sig, the signature; .att, the provenance attestation).
SIGNED = ("sign", "attest")


@dataclass(frozen=True)
class Placement:
    """One staged image at one hub: where it goes and which of its tags may move."""

    image: StagedImage
    hub_text: str  # as release.json (or the promotion) writes it: the journal's key
    movable: tuple[str, ...] = ()

    @property
    def hub(self) -> Hub:
        """The hub, parsed."""
        return parse_hub(self.hub_text)

    @property
    def repo(self) -> str:
        """The image's repository at the hub."""
        return self.hub.repository(self.image.binary)

    def where(self, tag: str = "") -> str:
        """`host/repo`, with `:tag` when given."""
        return f"{self.hub.host}/{self.repo}" + (f":{tag}" if tag else "")


class ImageSource(Protocol):
    """Where an image's bytes come from: the staged layout, or the staging hub."""

    def would(self, place: Placement) -> str:
        """What a dry run says instead of pushing the image to `place`."""
        ...

    def push(self, place: Placement) -> None:
        """Every blob and manifest of the image at `place`, by digest; no tag."""
        ...

    def root(self, place: Placement) -> tuple[str, str, bytes]:
        """The image's index (or manifest): digest, media type, bytes; what a tag names."""
        ...


@dataclass
class Counts:
    """What a run did, step by step (promote prints them)."""

    blobs_mounted: int = 0
    blobs_copied: int = 0
    blobs_present: int = 0
    bytes_copied: int = 0
    manifests_pushed: int = 0
    sboms_attached: int = 0
    signatures_pushed: int = 0
    attestations_pushed: int = 0
    tags_moved: int = 0
    wheels_uploaded: int = 0


@dataclass
class Job:
    """Everything the publishers need: what, from where, to where, with what."""

    release: StagedRelease
    folder: Path  # dist/release/<version>
    places: tuple[Placement, ...]  # image-major, each image's hubs in order
    source: ImageSource
    clients: Publisher
    index: PackageIndex | None
    key: SigningKey | None
    envelopes: tuple[bytes, ...]  # the checked provenance: what is attested
    clobber: bool
    on_step: StepLog
    error: type[ShipyardError]  # what a failed step raises (exit 1)
    hint: str = ""  # appended to a verification failure (publish: the journal)
    counts: Counts = field(default_factory=Counts)
    attachments: Mapping[str, Attachment] = field(default_factory=dict)  # by digest
    signed: bool | None = None  # None: signed when there is a key

    def client(self, place: Placement) -> Registry:
        """The (shared) registry client for `place`'s host."""
        return self.clients.client(place.hub.host)

    @property
    def signing(self) -> bool:
        """Whether the images are signed (and attested)."""
        return self.key is not None if self.signed is None else self.signed


@dataclass(frozen=True)
class Step:
    """One publish step: its journal key, what a dry run says, what it does."""

    key: str
    would: Callable[[], str]
    do: Callable[[], object]
    present: Callable[[], bool] | None = None  # confirms a journalled step
    detail: Mapping[str, str] = field(default_factory=dict)  # journalled with it


@dataclass
class Runner:
    """The wrapper of every step: journal, dry run, already-there check, log.

    A journalled step is skipped once the registry (or index) confirms it: the
    journal is outside SHA256SUMS, so a line it holds is a hint, never proof.
    Without a journal (promote) every step runs, and each checks what is there
    before it writes.
    """

    journal: Journal | None
    dry_run: bool
    on_step: StepLog

    def run(self, step: Step) -> None:
        """Run `step` unless journalled and present; in a dry run report it instead."""
        journalled = self.journal is not None and self.journal.done(step.key)
        if journalled and (step.present is None or step.present()):
            self.on_step(f"journalled {step.key}")
        elif journalled and not self.dry_run:
            self.on_step(f"journalled {step.key}, but not at the registry: doing it again")
            step.do()
        elif self.dry_run:
            self.on_step(step.would())
        else:
            step.do()
            if self.journal is not None:
                self.journal.record(step.key, **step.detail)


def _would_attach(place: Placement, sbom: ImageSbom) -> str:
    return f"would attach {place.where(sbom.tag)} -> {sbom.digest}"


def _would_sign(place: Placement, source: str) -> str:
    return f"would sign {place.where()}@{place.image.digest} ({source})"


def _would_attest(place: Placement) -> str:
    return f"would attach the provenance to {place.where()}@{place.image.digest}"


def _would_tag(place: Placement, tag: str) -> str:
    return f"would tag {place.where(tag)} -> {place.image.digest}"


def _has(job: Job, place: Placement, reference: str, digest: str = "") -> Callable[[], bool]:
    """Whether `place`'s repository holds `reference` (naming `digest` when given)."""

    def present() -> bool:
        found = job.client(place).manifest_exists(place.repo, reference)
        return found is not None and (not digest or found == digest)

    return present


def _has_attached(job: Job, place: Placement, suffix: str) -> Callable[[], bool]:
    """Whether the image at `place` has its `sha256-<hex>.<suffix>` attachment."""

    def present() -> bool:
        tag = attached_tag(place.image.digest, suffix)
        return job.client(place).manifest_exists(place.repo, tag) is not None

    return present


def _image_key(place: Placement) -> str:
    # The name older journals used for "pushed and tagged". A variant's step names
    # it: one equal to the default has the default's digest.
    image = place.image
    variant = f" ({image.variant} variant)" if image.variant else ""
    return f"image {place.hub_text}/{image.binary}@{image.digest}{variant}"


def _sbom_key(place: Placement, sbom: ImageSbom) -> str:
    return f"sbom {place.hub_text}/{place.image.binary}:{sbom.tag}@{sbom.digest}"


def _signed_key(kind: str, place: Placement) -> str:
    return f"{kind} {place.hub_text}/{place.image.binary}@{place.image.digest}"


def _tag_key(place: Placement, tag: str) -> str:
    return f"tag {place.hub_text}/{place.image.binary}:{tag}@{place.image.digest}"


def _push_image(job: Job, place: Placement) -> None:
    image, tag = place.image, place.image.tags[0]
    found = job.client(place).manifest_exists(place.repo, tag)
    if found not in (None, image.digest) and not job.clobber:
        raise job.error(
            f"{place.where(tag)} already exists with {found}, not the staged "
            f"{image.digest}; this version was released differently"
        )
    job.source.push(place)


def images(job: Job) -> Iterator[Step]:
    """Every image to every hub by digest; no tag moves."""
    for place in job.places:
        key, digest = _image_key(place), place.image.digest
        yield Step(
            key,
            functools.partial(job.source.would, place),
            functools.partial(_push_image, job, place),
            _has(job, place, digest, digest),
            {"digest": digest},
        )


def _attach(job: Job, place: Placement, sbom: ImageSbom) -> None:
    try:
        pushed = push_attachment(
            job.client(place),
            place.repo,
            sbom.tag,
            job.attachments[sbom.digest],
            on_step=job.on_step,
        )
    except ShipyardError as exc:
        raise job.error(str(exc)) from None
    job.counts.sboms_attached += bool(pushed)


def sboms(job: Job) -> Iterator[Step]:
    """Each image's SBOMs next to it on every hub, as `cosign attach sbom` does:
    `sha256-<index hex>.sbom` with every platform's document, and one per platform
    manifest (ko's way; what `cosign download sbom --platform` reads)."""
    by_image: dict[tuple[str, str], list[Placement]] = {}
    for place in job.places:
        by_image.setdefault((place.image.binary, place.image.variant), []).append(place)
    for places in by_image.values():
        for sbom in places[0].image.sboms:
            for place in places:
                yield Step(
                    _sbom_key(place, sbom),
                    functools.partial(_would_attach, place, sbom),
                    functools.partial(_attach, job, place, sbom),
                    _has(job, place, sbom.tag, sbom.digest),
                    {"digest": sbom.digest},
                )


def _sign(job: Job, place: Placement) -> None:
    from shipyard.release.signing import push_signature

    assert job.key is not None
    client, digest = job.client(place), place.image.digest
    job.counts.signatures_pushed += push_signature(
        client, place.repo, digest, job.key, on_step=job.on_step
    ).pushed


def _attest(job: Job, place: Placement, envelope: bytes) -> None:
    from shipyard.release.provenance import push_attestation

    client, digest = job.client(place), place.image.digest
    job.counts.attestations_pushed += push_attestation(
        client, place.repo, digest, envelope, on_step=job.on_step
    ).pushed


def signatures(job: Job) -> Iterator[Step]:
    """With a signing key: each image on every hub signed (`sha256-<hex>.sig`: the
    payload names the hub's repository) and the staged provenance attached (`.att`)."""
    if not job.signing:
        return
    source = job.key.source if job.key is not None else ""
    for place in job.places:
        digest = place.image.digest
        yield Step(
            _signed_key("sign", place),
            functools.partial(_would_sign, place, source),
            functools.partial(_sign, job, place),
            _has_attached(job, place, "sig"),
            {"digest": digest},
        )
        for envelope in job.envelopes:
            yield Step(
                _signed_key("attest", place),
                functools.partial(_would_attest, place),
                functools.partial(_attest, job, place, envelope),
                _has_attached(job, place, "att"),
                {"digest": digest},
            )


def _upload(job: Job, wheel: StagedFile) -> None:
    index, name = job.index, wheel.name
    if index is None:
        raise job.error("wheels are staged but no package index is set (SHIPYARD_INDEX_URL)")
    found = index.sha256(name)
    if found == wheel.sha256:
        job.on_step(f"have wheel {name} on {index.url}")
    elif found is not None:
        raise job.error(
            f"{index.url} already has {name} with sha256 {found}, not the staged "
            f"{wheel.sha256}; an index never replaces a file: release a new version"
        )
    else:
        index.upload(inside(job.folder, wheel.path), wheel.sha256)
        job.counts.wheels_uploaded += 1
        job.on_step(f"uploaded wheel {name} to {index.url}")


def _would_upload(job: Job, wheel: StagedFile) -> str:
    if job.index is None:  # a dry run needs no index (preflight stops a release without one)
        return f"would stage wheel {wheel.name} but not upload it: {NO_INDEX}"
    return f"would upload wheel {wheel.name} to {job.index.url}"


def _served(job: Job, wheel: StagedFile) -> bool:
    return job.index is not None and job.index.sha256(wheel.name) == wheel.sha256


def wheels(job: Job) -> Iterator[Step]:
    """Every wheel to the package index: public at once (an index never untags), so
    after the images, which fail more often, and before the tags."""
    for wheel in job.release.wheels:
        yield Step(
            f"wheel {wheel.name}",
            functools.partial(_would_upload, job, wheel),
            functools.partial(_upload, job, wheel),
            functools.partial(_served, job, wheel),
            {"sha256": wheel.sha256},
        )


def _move(job: Job, place: Placement, tag: str) -> None:
    client, digest = job.client(place), place.image.digest
    if client.manifest_exists(place.repo, tag) == digest:
        job.on_step(f"have tag {place.where(tag)}")
        return
    # No-clobber again, just before the move: someone may have pushed since the
    # checks before anything was sent.
    check_tag_move(
        client,
        place.hub.host,
        place.repo,
        tag,
        digest,
        movable=place.movable,
        clobber=job.clobber,
    )
    _, media_type, data = job.source.root(place)
    client.put_manifest(place.repo, tag, data, media_type)
    job.counts.tags_moved += 1
    job.on_step(f"tagged {place.where(tag)} -> {digest}")


def tag_order(places: Sequence[Placement]) -> list[tuple[Placement, str]]:
    """(place, tag) in the order tags move: each version tag everywhere, then the rest."""
    most = max((len(p.image.tags) for p in places), default=0)
    return [(p, p.image.tags[r]) for r in range(most) for p in places if r < len(p.image.tags)]


def tags(job: Job) -> Iterator[Step]:
    """The last phase: the version tag on every hub, then every other tag."""
    for place, tag in tag_order(job.places):
        digest = place.image.digest
        yield Step(
            _tag_key(place, tag),
            functools.partial(_would_tag, place, tag),
            functools.partial(_move, job, place, tag),
            _has(job, place, tag, digest),
            {"digest": digest},
        )


PUBLISHERS: tuple[Callable[[Job], Iterator[Step]], ...] = (images, sboms, signatures, wheels, tags)


def publish_all(job: Job, runner: Runner) -> None:
    """Every step of every publisher, in order, through `runner`."""
    for publisher in PUBLISHERS:
        for step in publisher(job):
            runner.run(step)


def step_keys(job: Job) -> list[str]:
    """The journal keys of every step, in order (nothing runs)."""
    return [step.key for publisher in PUBLISHERS for step in publisher(job)]
