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

Image variants are more image entries of release.json (`variant`, tags suffixed
`-<variant>`): each is copied and tagged like the default image, its movable
tags suffixed too (`latest-debug`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from shipyard._fs import sha256_file
from shipyard.dist import dist_dir, release_dir, temp_prefix
from shipyard.errors import ShipyardError, UsageError
from shipyard.manifest import Binary, Image, Manifest
from shipyard.oci.layout import blob_path, index_entries, manifest_blobs
from shipyard.oci.mediatypes import is_foreign_layer, is_index
from shipyard.oci.model import Descriptor, OCIError
from shipyard.oci.remote.attach import Attachment, push_attachment
from shipyard.oci.remote.push import Hub, Publisher, default_registry, parse_hub, variant_tags
from shipyard.oci.remote.registry import Registry, RegistryError
from shipyard.release.index import PackageIndex
from shipyard.release.provenance import push_attestation
from shipyard.release.rails import (
    TagClash,
    check_protected,
    check_tag_move,
    clash_error,
    find_clashes,
    refused_hubs,
)
from shipyard.release.sbom import attachment
from shipyard.release.signing import (
    SUMS,
    SUMS_SIG,
    SigningKey,
    VerifyError,
    push_signature,
    verify_image_signature,
    verify_sums,
)
from shipyard.release.verification import VerifiedRelease, check_release

__all__ = [
    "ImageCopy",
    "PromoteOptions",
    "Promotion",
    "PromotionError",
    "PromotionResult",
    "SbomAttachment",
    "StagedWheel",
    "check_signing_key",
    "plan_promotion",
    "promote",
]

# staging.RELEASE_JSON; not imported from there, which would load the build engine.
_RELEASE_JSON = "release.json"

Step = Callable[[str], None]


class PromotionError(ShipyardError):
    """A promotion found something other than release.json says, or a copy failed (exit 1)."""


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

    binary: str
    digest: str  # of the index (or single manifest), from release.json
    manifests: tuple[str, ...]  # the platform manifests' digests, from release.json
    tags: tuple[str, ...]  # the version tag first
    source: Hub
    target: Hub
    movable: tuple[str, ...]  # tags that may be moved off another digest (no-clobber)
    layout: Path | None  # the staged OCI layout, a local source of the same blobs
    variant: str = ""  # the image variant ("" the default image)
    sboms: tuple[SbomAttachment, ...] = ()  # the index's, then each platform's

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


@dataclass(frozen=True)
class StagedWheel:
    """A wheel of the staged release, checked against release.json."""

    name: str
    path: Path
    sha256: str


@dataclass(frozen=True)
class Promotion:
    """Everything a promotion will do, decided from local facts only (no network)."""

    version: str
    folder: Path  # dist/release/<version>
    images: tuple[ImageCopy, ...]
    wheels: tuple[StagedWheel, ...]
    # Each binary with an image, its image.hubs the final hubs: what the rails check.
    binaries: Mapping[str, Binary] = field(default_factory=dict)
    clobber: bool = False
    notes: tuple[str, ...] = ()  # told before a dry run's steps (a protected hub)
    signed: bool = False  # staged signed (SHA256SUMS.sig): promoted only with the key
    envelopes: tuple[bytes, ...] = ()  # the staged provenance (provenance.intoto.jsonl)
    # The public key (PEM) the folder was checked with when planned; b"" for none.
    checked_with: bytes = b""

    def tag_order(self) -> list[tuple[ImageCopy, str]]:
        """(image, tag) in the order tags move: the version tag everywhere, then the rest."""
        most = max((len(i.tags) for i in self.images), default=0)
        return [(i, i.tags[r]) for r in range(most) for i in self.images if r < len(i.tags)]


@dataclass
class PromotionResult:
    """What a promotion did: counts per blob outcome, and what is where now."""

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
    images: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The result as JSON for `--json`."""
        return dict(vars(self))


# -- 1. local: what to do, from release.json, the staged files and the manifest -----------


def _usage(folder: Path, what: str) -> UsageError:
    return UsageError(f"{folder / _RELEASE_JSON}: {what}; stage the release again")


def _read_staged(folder: Path, version: str, key: SigningKey | None) -> VerifiedRelease:
    """The staged release in `folder`, through the check `shipyard verify` runs.

    UsageError (exit 2) when there is none, it is a snapshot, or the key does not
    fit it (`_check_key`); PromotionError (exit 1) when the folder is not what was
    staged and signed: a file changed, added or removed, release.json or the
    provenance rewritten, a symlink planted, another version's folder.
    """
    path = folder / _RELEASE_JSON
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
    staged = verified.staged
    if staged.get("snapshot"):
        raise UsageError(
            f"{path} is a snapshot: a snapshot is never published, so there is nothing at a "
            f"staging hub to promote; release it with `shipyard release --version={version}`"
        )
    return verified


def _inside(folder: Path, rel: object) -> Path:
    """`folder/rel` for a path release.json names; never outside `folder`."""
    parts = PurePosixPath(str(rel)).parts
    if not isinstance(rel, str) or not parts or rel.startswith("/") or ".." in parts:
        raise _usage(folder, f"the path {rel!r} is outside {folder}")
    return folder.joinpath(*parts)


def _wheels(folder: Path, staged: Mapping[str, Any]) -> tuple[StagedWheel, ...]:
    wheels = []
    for art in staged["artifacts"]:
        if not isinstance(art, dict) or art.get("kind") != "wheel":
            continue
        path = _inside(folder, art.get("path"))
        if not path.is_file():
            raise UsageError(f"{path} is missing from the staged release; stage it again")
        found = sha256_file(path)
        if found != art.get("sha256"):
            raise UsageError(
                f"{path} changed since it was staged: its sha256 is {found}, release.json says "
                f"{art.get('sha256')}; nothing was promoted. Stage the release again"
            )
        wheels.append(StagedWheel(path.name, path, found))
    return tuple(wheels)


def _sboms(
    folder: Path, staged: Mapping[str, Any], art: Mapping[str, Any]
) -> tuple[SbomAttachment, ...]:
    """The SBOM attachments of the image entry `art`, as release publish attaches them:
    each rebuilt from the staged documents; UsageError when one is not the attachment
    release.json names (a document changed since it was staged)."""
    about = art.get("sbom")
    if not about:
        return ()
    if not isinstance(about, dict):
        raise _usage(folder, f"the image of {art.get('binary')} has an sbom that is not an object")
    platforms = {
        a.get("path"): str(a.get("platform") or "")
        for a in staged["artifacts"]
        if isinstance(a, dict) and a.get("kind") == "sbom"
    }
    found = []
    for entry in [about, *(about.get("platforms") or [])]:
        if not isinstance(entry, dict) or not isinstance(entry.get("documents"), list):
            raise _usage(folder, f"an sbom entry of the image of {art.get('binary')} is damaged")
        documents = []
        for rel in entry.get("documents") or []:
            path = _inside(folder, rel)
            try:
                data = path.read_bytes()
            except OSError:
                raise UsageError(
                    f"{path} is missing from the staged release; stage it again"
                ) from None
            documents.append((PurePosixPath(rel).name, platforms.get(rel, ""), data))
        made = attachment(documents)
        if made.digest != entry.get("digest") or not isinstance(entry.get("tag"), str):
            raise UsageError(
                f"{folder / _RELEASE_JSON}: the SBOMs of {art.get('binary')} make the "
                f"attachment {made.digest}, not the staged {entry.get('digest')} (a document "
                "changed since it was staged); nothing was promoted. Stage the release again"
            )
        found.append(SbomAttachment(entry["tag"], made))
    return tuple(found)


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
    manifest: Manifest,
    options: PromoteOptions,
    folder: Path,
    staged: Mapping[str, Any],
) -> tuple[list[ImageCopy], dict[str, Binary]]:
    source = parse_hub(options.source)
    copies: list[ImageCopy] = []
    binaries: dict[str, Binary] = {}
    for art in staged["artifacts"]:
        if not isinstance(art, dict) or art.get("kind") != "image":
            continue
        binary, digest, tags = art.get("binary"), art.get("digest"), art.get("tags")
        variant = art.get("variant") or ""
        if not isinstance(binary, str) or not isinstance(digest, str):
            raise _usage(folder, f"an image artifact lacks its binary or digest: {art}")
        if not tags or not all(isinstance(t, str) for t in tags):
            raise _usage(folder, f"the image of {binary} has no tags")
        if not isinstance(variant, str):
            raise _usage(folder, f"the image of {binary} has a variant that is not a name")
        children = tuple(str(m.get("digest")) for m in art.get("manifests") or [])
        layout = _inside(folder, art["path"]) if isinstance(art.get("path"), str) else None
        declared = manifest.binaries.get(binary)
        if declared is None and not options.to:
            raise UsageError(
                f"{folder / _RELEASE_JSON} has an image of {binary}, which {manifest.path} "
                "does not declare (renamed or removed since it was staged); pass --to HUB "
                "for its final hubs"
            )
        # With --to, a binary the manifest lost gets a stand-in: the defaults' rails.
        final = declared or Binary(binary, Path(), "", ("image",), (), (), Image(), ())
        hubs = _targets(final, source, options, manifest.path)
        final = binaries.setdefault(binary, _final_binary(final, hubs))
        movable = variant_tags(final.image.movable_tags, variant)
        sboms = _sboms(folder, staged, art)
        copies += [
            ImageCopy(
                binary, digest, children, tuple(tags), source, hub, movable, layout, variant, sboms
            )
            for hub in hubs
        ]
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
        raise UsageError(f"{folder / _RELEASE_JSON} lists no image and no wheel to promote")
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


# -- 2-6. remote: check, copy, upload, tag, verify ------------------------------------------


class _Copier:
    """Copies images by digest between registries, through one client per host."""

    def __init__(self, clients: Publisher, scratch: Path, on_step: Step) -> None:
        self._clients = clients
        self._scratch = scratch
        self._on_step = on_step
        self.result = PromotionResult()

    @property
    def scratch(self) -> Path:
        """The promotion's scratch folder (removed when it ends)."""
        return self._scratch

    def client(self, host: str) -> Registry:
        """The shared client for `host`."""
        return self._clients.client(host)

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


def _attach_sbom(copier: _Copier, image: ImageCopy, sbom: SbomAttachment, on_step: Step) -> None:
    """`sbom` at the final hub under its tag, as release publish attaches it; a tag
    already naming the same manifest is success (nothing is pushed)."""
    client, repo = copier.client(image.target.host), image.target_repo
    try:
        pushed = push_attachment(client, repo, sbom.tag, sbom.made, on_step=on_step)
    except ShipyardError as exc:
        raise PromotionError(str(exc)) from None
    if pushed:
        copier.result.sboms_attached += 1


def _sign(
    copier: _Copier, promotion: Promotion, image: ImageCopy, key: SigningKey, on_step: Step
) -> None:
    """The image signed at its final hub (the payload names the final repository) and
    the staged provenance attached as it is; each skipped when already there."""
    client, repo = copier.client(image.target.host), image.target_repo
    if push_signature(client, repo, image.digest, key, on_step=on_step).pushed:
        copier.result.signatures_pushed += 1
    for envelope in promotion.envelopes:
        if push_attestation(client, repo, image.digest, envelope, on_step=on_step).pushed:
            copier.result.attestations_pushed += 1


def _check_source(copier: _Copier, promotion: Promotion, on_step: Step) -> None:
    """Each image's version tag at the staging hub names release.json's digest."""
    for image in {(i.binary, i.tags[0]): i for i in promotion.images}.values():
        client, repo, tag = copier.client(image.source.host), image.source_repo, image.tags[0]
        where = f"{image.source.host}/{repo}:{tag}"
        found = client.manifest_exists(repo, tag)
        if found is None:
            raise PromotionError(
                f"{image.binary}: {where} is not at the staging hub {image.source}; release.json "
                f"says {image.digest}. Publish the release there first "
                f"(HUB={image.source} shipyard release --version={promotion.version})"
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


def _check_targets(copier: _Copier, promotion: Promotion, dry_run: bool, on_step: Step) -> None:
    """No final hub holds a tag of the release on another image unless the tag may
    move (no-clobber, as a release's preflight checks it); every final repository
    takes pushes from these credentials."""
    clashes: list[TagClash] = []
    for image in promotion.images:
        client = copier.client(image.target.host)
        try:
            clashes += find_clashes(
                client,
                promotion.binaries[image.binary],
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
    if clashes and promotion.clobber:
        for clash in clashes:
            on_step(f"--clobber: {clash.reference} ({clash.digest}) will move")
    elif clashes:
        version_tags = {image.tags[0] for image in promotion.images}
        raise clash_error(clashes, next((c.tag for c in clashes if c.tag in version_tags), ""))


def _need_index(index: PackageIndex | None, promotion: Promotion, dry_run: bool) -> None:
    """Staged wheels need a package index; known before any network is used."""
    if promotion.wheels and index is None and not dry_run:
        raise UsageError(
            f"the release has {len(promotion.wheels)} wheel(s) to promote but no package index "
            "is set; set SHIPYARD_INDEX_URL, SHIPYARD_INDEX_USER and SHIPYARD_INDEX_PASSWORD "
            "(or pass --index-url)"
        )


def _check_index(index: PackageIndex | None, promotion: Promotion, dry_run: bool) -> None:
    if not promotion.wheels or index is None:
        return
    if not dry_run:
        index.check_credentials()
    for wheel in promotion.wheels:
        found = index.sha256(wheel.name)
        if found not in (None, wheel.sha256):
            raise PromotionError(
                f"{index.url} already has {wheel.name} with sha256 {found}, not the staged "
                f"{wheel.sha256}; an index never replaces a file. Nothing was copied"
            )


def _upload(index: PackageIndex | None, wheel: StagedWheel, result: PromotionResult) -> str:
    if index is None:
        raise PromotionError("wheels are staged but no package index is set")
    if index.sha256(wheel.name) == wheel.sha256:
        return f"have wheel {wheel.name} on {index.url}"
    index.upload(wheel.path, wheel.sha256)
    result.wheels_uploaded += 1
    return f"uploaded wheel {wheel.name} to {index.url}"


def _verify(
    copier: _Copier,
    promotion: Promotion,
    index: PackageIndex | None,
    key: SigningKey | None,
    on_step: Step,
) -> None:
    """Every tag at every final hub names release.json's digest, every SBOM attachment
    is there, with `key` every image's signature verifies; every wheel is served."""
    for image in promotion.images:
        client = copier.client(image.target.host)
        for tag in image.tags:
            found = client.manifest_exists(image.target_repo, tag)
            if found != image.digest:
                raise PromotionError(
                    f"{image.binary}: {image.where(tag)} is {found}, release.json says "
                    f"{image.digest}"
                )
        for child in image.manifests:
            if client.manifest_exists(image.target_repo, child) != child:
                raise PromotionError(f"{image.binary}: {image.where()}@{child} is missing")
        for sbom in image.sboms:
            found = client.manifest_exists(image.target_repo, sbom.tag)
            if found != sbom.digest:
                raise PromotionError(
                    f"{image.binary}: {image.where(sbom.tag)} is {found}, release.json says "
                    f"{sbom.digest}"
                )
        if key is not None:
            try:
                verify_image_signature(client, image.target_repo, image.digest, key.public)
            except VerifyError as exc:
                raise PromotionError(str(exc)) from None
            on_step(f"verified the signature of {image.where()}@{image.digest}")
        copier.result.images.append(
            {
                "binary": image.binary,
                "hub": str(image.target),
                "repository": image.where(),
                "digest": image.digest,
                "manifests": list(image.manifests),
                "tags": list(image.tags),
            }
        )
    for wheel in promotion.wheels:
        found = index.sha256(wheel.name) if index is not None else None
        if found != wheel.sha256:
            raise PromotionError(f"the index serves {wheel.name} as {found}, not {wheel.sha256}")


def promote(
    promotion: Promotion,
    *,
    index: PackageIndex | None,
    registry_for: Callable[[str], Registry] = default_registry,
    dry_run: bool = False,
    signing_key: SigningKey | None = None,
    on_step: Step = lambda _: None,
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
    dist = promotion.folder.parent.parent
    dist.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dist, prefix=temp_prefix("promote")) as scratch:
        copier = _Copier(clients, Path(scratch), on_step)
        _check_source(copier, promotion, on_step)
        _check_targets(copier, promotion, dry_run, on_step)
        _check_index(index, promotion, dry_run)
        if dry_run:
            _report_dry_run(promotion, index, signing_key, on_step)
            return copier.result
        for image in promotion.images:
            copier.copy(image)
        for image in promotion.images:
            for sbom in image.sboms:
                _attach_sbom(copier, image, sbom, on_step)
        if signing_key is not None:
            for image in promotion.images:
                _sign(copier, promotion, image, signing_key, on_step)
        for wheel in promotion.wheels:
            on_step(_upload(index, wheel, copier.result))
        for image, tag in promotion.tag_order():
            client = copier.client(image.target.host)
            if client.manifest_exists(image.target_repo, tag) == image.digest:
                on_step(f"have tag {image.where(tag)}")
                continue
            # No-clobber again, just before the move: someone may have pushed since.
            check_tag_move(
                client,
                image.target.host,
                image.target_repo,
                tag,
                image.digest,
                movable=image.movable,
                clobber=promotion.clobber,
            )
            data, media_type, _ = client.get_manifest(image.target_repo, image.digest)
            client.put_manifest(image.target_repo, tag, data, media_type)
            copier.result.tags_moved += 1
            on_step(f"tagged {image.where(tag)} -> {image.digest}")
        _verify(copier, promotion, index, signing_key, on_step)
        return copier.result


def _report_dry_run(
    promotion: Promotion, index: PackageIndex | None, key: SigningKey | None, on_step: Step
) -> None:
    for note in promotion.notes:
        on_step(note)
    for image in promotion.images:
        how = "mounting blobs" if image.same_registry else "copying blobs"
        on_step(
            f"would copy {image.source.host}/{image.source_repo}@{image.digest} to "
            f"{image.where()} ({how})"
        )
    for image in promotion.images:
        for sbom in image.sboms:
            on_step(f"would attach {image.where(sbom.tag)} -> {sbom.digest}")
    for image in promotion.images:
        if key is not None:
            on_step(f"would sign {image.where()}@{image.digest} ({key.source})")
        if key is not None and promotion.envelopes:
            on_step(f"would attach the provenance to {image.where()}@{image.digest}")
    for wheel in promotion.wheels:
        if index is None:
            on_step(f"would not upload wheel {wheel.name}: no package index is set")
        else:
            on_step(f"would upload wheel {wheel.name} to {index.url}")
    for image, tag in promotion.tag_order():
        on_step(f"would tag {image.where(tag)} -> {image.digest}")
