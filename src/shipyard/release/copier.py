"""Promotion's remote half: the staging hub checked, the final hubs checked, images copied.

`HubSource` is promote's source for the publishers (`publishers.PUBLISHERS`):
every image copied by digest from the staging hub to a final hub, each blob
mounted across repositories on one registry host, else uploaded from the
staged layout when it holds the very bytes, else downloaded from the staging
hub; then the platform manifests and the index with the bytes the staging hub
served. The checks run before anything is written: the staging hub serves
release.json's digests (`check_source`), no final hub holds a tag of the
release on another image unless it may move and every final repository takes
pushes (`check_targets`), the index holds no other bytes under a wheel's name
(`check_index`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from shipyard._fs import sha256_file
from shipyard.errors import ShipyardError, UsageError
from shipyard.manifest import Binary
from shipyard.oci.layout import blob_path, index_entries, manifest_blobs
from shipyard.oci.mediatypes import is_foreign_layer, is_index
from shipyard.oci.model import Descriptor, OCIError
from shipyard.oci.remote.attach import Attachment
from shipyard.oci.remote.push import Hub, Publisher
from shipyard.oci.remote.registry import Registry, RegistryError
from shipyard.release.index import PackageIndex
from shipyard.release.publishers import Counts, Placement, StepLog
from shipyard.release.rails import TagClash, clash_error, find_clashes
from shipyard.release.staged import StagedFile, StagedImage

__all__ = [
    "HubSource",
    "ImageCopy",
    "Promoted",
    "PromotionError",
    "SbomAttachment",
    "check_index",
    "check_source",
    "check_targets",
]


class PromotionError(ShipyardError):
    """A promotion found something other than release.json says, or a copy failed (exit 1)."""


@dataclass(frozen=True)
class Promoted:
    """An image at a final hub, verified."""

    binary: str
    hub: str
    repository: str  # host/repository
    digest: str
    manifests: tuple[str, ...]
    tags: tuple[str, ...]


@dataclass(frozen=True)
class SbomAttachment:
    """One SBOM attachment of an image (`sha256-<hex>.sbom`), rebuilt from the staged
    documents and checked against the digest release.json gives it."""

    tag: str
    made: Attachment = field(hash=False, compare=False)

    @property
    def digest(self) -> str:
        """The attachment manifest's digest, as release.json lists it."""
        return self.made.digest


@dataclass(frozen=True)
class ImageCopy:
    """One image of the release to one final hub: where from, where to, what it must be."""

    image: StagedImage  # as release.json stages it
    source: Hub
    target: Hub
    movable: tuple[str, ...]  # tags that may be moved off another digest (no-clobber)
    layout: Path | None  # the staged OCI layout, a local source of the same blobs
    sboms: tuple[SbomAttachment, ...] = ()  # the index's, then each platform's

    @property
    def binary(self) -> str:
        """The binary whose image this is."""
        return self.image.binary

    @property
    def digest(self) -> str:
        """The index's (or single manifest's) digest, from release.json."""
        return self.image.digest

    @property
    def manifests(self) -> tuple[str, ...]:
        """The platform manifests' digests, from release.json."""
        return tuple(m.digest for m in self.image.manifests)

    @property
    def tags(self) -> tuple[str, ...]:
        """The tags, the version tag first."""
        return self.image.tags

    @property
    def variant(self) -> str:
        """The image variant ("" the default image)."""
        return self.image.variant

    @property
    def placement(self) -> Placement:
        """The image at its final hub, as the publishers take it."""
        return Placement(self.image, str(self.target), self.movable)

    @property
    def source_repo(self) -> str:
        """The image's repository at the staging hub."""
        return self.source.repository(self.binary)

    @property
    def target_repo(self) -> str:
        """The image's repository at the final hub."""
        return self.target.repository(self.binary)

    @property
    def same_registry(self) -> bool:
        """True when the blobs can be mounted rather than copied."""
        return self.source.host == self.target.host

    def where(self, tag: str = "") -> str:
        """`host/repo`, with `:tag` when given, at the final hub."""
        return f"{self.target.host}/{self.target_repo}" + (f":{tag}" if tag else "")

    def promoted(self) -> Promoted:
        """The image as the promotion's result lists it."""
        return Promoted(
            self.binary, str(self.target), self.where(), self.digest, self.manifests, self.tags
        )


class HubSource:
    """The promote source: each image copied by digest from the staging hub, blobs
    mounted on the same registry host, else uploaded from the staged layout (or
    downloaded from the staging hub when the layout lacks them)."""

    def __init__(
        self,
        clients: Publisher,
        scratch: Path,
        on_step: StepLog,
        copies: Sequence[ImageCopy],
        counts: Counts,
    ) -> None:
        self.clients = clients
        self._scratch = scratch
        self._on_step = on_step
        self._copies = {(c.binary, c.variant, str(c.target)): c for c in copies}
        self.result = counts

    def _copy_of(self, place: Placement) -> ImageCopy:
        return self._copies[(place.image.binary, place.image.variant, place.hub_text)]

    def would(self, place: Placement) -> str:
        """`would copy <staging>@<digest> to <final> (mounting|copying blobs)`."""
        image = self._copy_of(place)
        how = "mounting blobs" if image.same_registry else "copying blobs"
        return (
            f"would copy {image.source.host}/{image.source_repo}@{image.digest} to "
            f"{image.where()} ({how})"
        )

    def push(self, place: Placement) -> None:
        """Make the final repository hold the image by digest; no tag moves."""
        self.copy(self._copy_of(place))

    def root(self, place: Placement) -> tuple[str, str, bytes]:
        """The index as the final hub holds it (copied byte for byte)."""
        image = self._copy_of(place)
        data, media_type, _ = self.client(image.target.host).get_manifest(
            image.target_repo, image.digest
        )
        return image.digest, media_type, data

    def client(self, host: str) -> Registry:
        """The shared client for `host`."""
        return self.clients.client(host)

    def copy(self, image: ImageCopy) -> None:
        """Make the final repository hold the image by digest; no tag moves."""
        self._manifest(image, image.digest)

    def _manifest(self, image: ImageCopy, digest: str) -> None:
        dest = self.client(image.target.host)
        if dest.manifest_exists(image.target_repo, digest) == digest:
            # A registry accepts a manifest only once all it names is there.
            self._on_step(f"have manifest {image.where()}@{digest}")
            return
        data, media_type, _ = self.client(image.source.host).get_manifest(image.source_repo, digest)
        try:
            if is_index(media_type):
                for child in index_entries(data):
                    self._manifest(image, child.digest)
            else:
                for blob in manifest_blobs(data):
                    if not is_foreign_layer(blob.media_type):
                        self._blob(image, blob)
        except OCIError as exc:
            raise PromotionError(
                f"{image.source.host}/{image.source_repo}@{digest}: {exc}"
            ) from None
        dest.put_manifest(image.target_repo, digest, data, media_type)
        self.result.manifests_pushed += 1
        self._on_step(f"pushed manifest {image.where()}@{digest}")

    def _blob(self, image: ImageCopy, blob: Descriptor) -> None:
        dest, repo = self.client(image.target.host), image.target_repo
        if dest.blob_exists(repo, blob.digest):
            self.result.blobs_present += 1
            self._on_step(f"have blob {image.where()}@{blob.digest}")
            return
        path, downloaded = self._local(image, blob), False
        if path is None:
            path, downloaded = self._scratch / blob.digest.replace(":", "-"), True
            source = self.client(image.source.host)
            source.pull_blob(image.source_repo, blob.digest, path, size=blob.size)
        try:
            mount = image.source_repo if image.same_registry else None
            uploaded = dest.push_blob(repo, blob.digest, blob.size, path, mount_from=mount)
        finally:
            if downloaded:
                path.unlink(missing_ok=True)
        if uploaded:
            self.result.blobs_copied += 1
            self.result.bytes_copied += blob.size
            self._on_step(f"copied blob {image.where()}@{blob.digest} ({blob.size} bytes)")
        else:
            self.result.blobs_mounted += 1
            self._on_step(f"mounted blob {image.where()}@{blob.digest} from {image.source_repo}")

    @staticmethod
    def _local(image: ImageCopy, blob: Descriptor) -> Path | None:
        """The blob's file in the staged layout when it holds these very bytes.

        A mount reads no byte of it; an upload sends it and the registry checks
        the digest, but a damaged file is better fetched again than refused there.
        """
        if image.layout is None:
            return None
        try:
            path = blob_path(image.layout, blob.digest)
        except OCIError:  # not sha256: fetched from the registry instead
            return None
        hexdigest = path.name
        if not path.is_file() or path.stat().st_size != blob.size:
            return None
        if not image.same_registry and sha256_file(path) != hexdigest:
            return None
        return path


def check_source(
    copier: HubSource, images: Sequence[ImageCopy], version: str, on_step: StepLog
) -> None:
    """Each image's version tag at the staging hub names release.json's digest."""
    for image in {(i.binary, i.tags[0]): i for i in images}.values():
        client, repo, tag = copier.client(image.source.host), image.source_repo, image.tags[0]
        where = f"{image.source.host}/{repo}:{tag}"
        found = client.manifest_exists(repo, tag)
        if found is None:
            raise PromotionError(
                f"{image.binary}: {where} is not at the staging hub {image.source}; release.json "
                f"says {image.digest}. Publish the release there first "
                f"(HUB={image.source} shipyard release --version={version})"
            )
        if found != image.digest:
            raise PromotionError(
                f"{image.binary}: the staging hub {image.source} has {where} = {found}, but "
                f"release.json says {image.digest}; the staged image was replaced after the "
                "release. Nothing was copied and no tag moved"
            )
        data, media_type, _ = client.get_manifest(repo, image.digest)
        if is_index(media_type) and image.manifests:
            listed = tuple(d.digest for d in index_entries(data))
            if listed != image.manifests:
                raise PromotionError(
                    f"{image.binary}: {where} ({image.digest}) lists platform manifests "
                    f"{', '.join(listed)}; release.json says {', '.join(image.manifests)}"
                )
        on_step(f"verified staging {where} is {image.digest}")


def check_targets(
    copier: HubSource,
    images: Sequence[ImageCopy],
    binaries: Mapping[str, Binary],
    *,
    clobber: bool,
    dry_run: bool,
    on_step: StepLog,
) -> None:
    """No final hub holds a tag of the release on another image unless the tag may
    move (no-clobber, as a release's preflight checks it); every final repository
    takes pushes from these credentials."""
    clashes: list[TagClash] = []
    for image in images:
        client = copier.client(image.target.host)
        try:
            clashes += find_clashes(
                client,
                binaries[image.binary],
                str(image.target),
                image.tags,
                pushed=(image.digest,),  # this very image: promoted before, not a clash
                variant=image.variant,
            )
            if not dry_run:
                client.check_push(image.target_repo)
        except RegistryError as exc:
            raise UsageError(
                f"hub {image.target}: {exc.detail}; log in (docker login "
                f"{image.target.host}) or set SHIPYARD_REGISTRY_USER/SHIPYARD_REGISTRY_PASSWORD"
            ) from None
    if clashes and clobber:
        for clash in clashes:
            on_step(f"--clobber: {clash.reference} ({clash.digest}) will move")
    elif clashes:
        version_tags = {image.tags[0] for image in images}
        raise clash_error(clashes, next((c.tag for c in clashes if c.tag in version_tags), ""))


def check_index(index: PackageIndex | None, wheels: Sequence[StagedFile], dry_run: bool) -> None:
    """No wheel is on the index with other bytes; the index takes these credentials."""
    if not wheels or index is None:
        return
    if not dry_run:
        index.check_credentials()
    for wheel in wheels:
        found = index.sha256(wheel.name)
        if found not in (None, wheel.sha256):
            raise PromotionError(
                f"{index.url} already has {wheel.name} with sha256 {found}, not the staged "
                f"{wheel.sha256}; an index never replaces a file. Nothing was copied"
            )
