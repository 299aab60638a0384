"""Push OCI image layouts to registries: blobs, then manifests by digest, then tags.

The order is what makes a push safe to watch and to interrupt: every blob is in
the repository before a manifest names it, every platform manifest before the
index, and tags move last, so a tag never points at an incomplete index. Each
step checks first (HEAD) and skips what is there, so a second push uploads
nothing and a push killed half-way is finished by running it again.

An image is pushed under the binary's tags only when its index holds every
platform the binary declares (`require_platforms`): an index built for a
subset (`build --platform linux/arm64`) would otherwise replace every other
platform behind those tags.

An image variant (`image.variants`) is pushed to the same repository with the
binary's tags suffixed `-<variant>` (`variant_tags`): `1.4.0-debug`,
`latest-distroless`. A variant equal to the default has the default's digest,
so pushing it uploads nothing and only its tags move. The image of each target
Python but the first (project.python a list, `${python}` in image.base) is such a
variant, named `python3.12`: its tags are `1.4.0-python3.12`, `latest-python3.12`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from shipyard.errors import UsageError
from shipyard.oci.layout import blob_file, index_entries, layout_tops, manifest_blobs, read_blob
from shipyard.oci.mediatypes import is_index
from shipyard.oci.model import Descriptor, OCIError, Platform
from shipyard.oci.remote.auth import find_credentials
from shipyard.oci.remote.reference import validate_repository, validate_tag
from shipyard.oci.remote.registry import Registry

__all__ = [
    "Hub",
    "LayoutBlob",
    "LayoutImage",
    "LayoutManifest",
    "Publisher",
    "PushResult",
    "default_registry",
    "missing_platforms",
    "move_tags",
    "parse_hub",
    "pull_registry",
    "push_layout",
    "read_layout_image",
    "require_platforms",
    "variant_tags",
]

Step = Callable[[str], None]
"""Progress callback: one line per step taken or skipped (the library never prints)."""


@dataclass(frozen=True)
class LayoutBlob:
    """A blob of an OCI layout: its digest, size and file."""

    digest: str
    size: int
    path: Path


class LayoutManifest(NamedTuple):
    """An index or manifest of a layout as it is pushed: digest, media type and bytes."""

    digest: str
    media_type: str
    data: bytes

    @classmethod
    def read(cls, layout: Path, desc: Descriptor) -> LayoutManifest:
        """The document `desc` names in `layout`, checked against its digest."""
        return cls(desc.digest, desc.media_type, read_blob(layout, desc))


@dataclass(frozen=True)
class LayoutImage:
    """What one layout holds, in push order: blobs, platform manifests, then the root."""

    blobs: tuple[LayoutBlob, ...]
    manifests: tuple[LayoutManifest, ...]
    root: LayoutManifest  # the index (or single manifest) the tags name
    platforms: tuple[str, ...]  # os/arch[/variant] of each platform manifest


def read_layout_image(layout: Path) -> LayoutImage:
    """Read the layout at `layout`; its index.json must name exactly one image or index.

    The layout is read with `shipyard.oci.layout`'s readers (descriptors, digests
    checked); a missing, damaged or truncated blob is a UsageError: rebuild the image.
    """
    try:
        tops = layout_tops(layout)
        if len(tops) != 1:
            raise UsageError(f"{layout}/index.json: expected one entry, found {len(tops)}")
        root = LayoutManifest.read(layout, tops[0])
        children = index_entries(root.data) if is_index(root.media_type) else ()
        manifests = tuple(LayoutManifest.read(layout, child) for child in children)
        blobs: dict[str, LayoutBlob] = {}
        for image in manifests if is_index(root.media_type) else (root,):
            for desc in manifest_blobs(image.data):
                if desc.digest not in blobs:
                    blobs[desc.digest] = LayoutBlob(desc.digest, desc.size, blob_file(layout, desc))
    except (OCIError, ValueError) as exc:
        raise UsageError(f"{exc}; rebuild the image") from None
    platforms = tuple(str(child.platform or "?/?") for child in children)
    return LayoutImage(tuple(blobs.values()), manifests, root, platforms)


def missing_platforms(image: LayoutImage, declared: Sequence[str]) -> list[str]:
    """The platforms of `declared` no manifest of `image` serves (a variant-less one
    matches any variant, as `Platform.matches` says), in declared order."""
    have = [Platform.parse(p) for p in image.platforms if p != "?/?"]
    return [p for p in declared if not any(Platform.parse(p).matches(h) for h in have)]


def require_platforms(
    binary: str, layout: Path, image: LayoutImage, declared: Sequence[str]
) -> None:
    """Raise UsageError (exit 2) when `image` lacks a platform `binary` declares."""
    missing = missing_platforms(image, declared)
    if not missing:
        return
    has = ", ".join(image.platforms) or "none"
    raise UsageError(
        f"{binary}: the image in {layout} lacks platform(s) {', '.join(missing)} "
        f"(it has {has}); pushing it would leave them out of every tag. Build every "
        f"platform (shipyard build --binary={binary} --output=image), or pass "
        "--allow-partial to push it anyway"
    )


def variant_tags(tags: Sequence[str], variant: str) -> tuple[str, ...]:
    """`tags` of the image variant `variant`: each suffixed `-<variant>` (`1.4.0-debug`);
    the default image ("") keeps them as they are. Each is checked as a tag."""
    out = tuple(tags) if not variant else tuple(f"{tag}-{variant}" for tag in tags)
    for tag in out:
        validate_tag(tag)
    return out


def push_layout(
    registry: Registry,
    repo: str,
    image: LayoutImage,
    tags: Sequence[str],
    *,
    mount_from: str | None = None,
    on_step: Step = lambda _: None,
) -> str:
    """Push `image` to `repo` and point `tags` at it; return the root digest.

    Blobs (mounted from `mount_from` when it has them), then platform manifests by
    digest, then the index by digest, then each tag, skipping what is already there.
    """
    validate_repository(repo)
    for tag in tags:
        validate_tag(tag)
    where = f"{registry.host}/{repo}"
    for blob in image.blobs:
        pushed = registry.push_blob(repo, blob.digest, blob.size, blob.path, mount_from=mount_from)
        on_step(f"{'pushed' if pushed else 'have'} blob {where}@{blob.digest}")
    for digest, media_type, data in (*image.manifests, image.root):
        if registry.manifest_exists(repo, digest) == digest:
            on_step(f"have manifest {where}@{digest}")
            continue
        registry.put_manifest(repo, digest, data, media_type)
        on_step(f"pushed manifest {where}@{digest}")
    return move_tags(registry, repo, image.root, tags, on_step=on_step)


def move_tags(
    registry: Registry,
    repo: str,
    root: tuple[str, str, bytes],
    tags: Sequence[str],
    *,
    on_step: Step = lambda _: None,
) -> str:
    """Point each of `tags` in `repo` at `root` (digest, media type, bytes), already pushed.

    A tag already naming `root` is left alone. Returns the root digest.
    """
    validate_repository(repo)
    for tag in tags:
        validate_tag(tag)
    where = f"{registry.host}/{repo}"
    digest, media_type, data = root
    for tag in tags:
        if registry.manifest_exists(repo, tag) == digest:
            on_step(f"have tag {where}:{tag}")
            continue
        registry.put_manifest(repo, tag, data, media_type)
        on_step(f"tagged {where}:{tag} -> {digest}")
    return digest


@dataclass(frozen=True)
class Hub:
    """A push destination prefix, `host[:port]/path`; an image goes to `<hub>/<binary>`."""

    host: str
    path: str

    def repository(self, binary: str) -> str:
        """The repository of `binary` under this hub."""
        return validate_repository(f"{self.path}/{binary}" if self.path else binary)

    def __str__(self) -> str:
        return f"{self.host}/{self.path}" if self.path else self.host


def parse_hub(text: str) -> Hub:
    """Parse a manifest `image.hubs` entry; it must name a registry host."""
    host, _, path = text.strip().rstrip("/").partition("/")
    if not host or not ("." in host or ":" in host or host == "localhost"):
        raise UsageError(
            f"image hub {text!r} must start with a registry host, e.g. 127.0.0.1:5000/mesh"
        )
    if path:
        validate_repository(path, text=text)
    return Hub(host, path)


@dataclass(frozen=True)
class PushResult:
    """One image pushed to one hub: where, its root digest, and its tags."""

    hub: str
    repository: str
    digest: str
    tags: tuple[str, ...]

    @property
    def name(self) -> str:
        """`host/repository`, as skopeo and docker name the image."""
        return f"{self.hub.partition('/')[0]}/{self.repository}"


def default_registry(host: str, environ: Mapping[str, str] | None = None) -> Registry:
    """A client for `host` with credentials from the environment or docker's config."""
    return Registry(host, credentials=find_credentials(host, environ=environ), environ=environ)


def pull_registry(host: str, environ: Mapping[str, str] | None = None) -> Registry:
    """A client for a registry shipyard only reads from (a base image's, one `verify`
    checks): only credentials configured for `host` itself are sent, never the global
    SHIPYARD_REGISTRY_USER pair, which is for the hubs shipyard pushes to."""
    return Registry(host, environ=environ, global_credentials=False)


@dataclass
class Publisher:
    """Fan-out: pushes each image to every hub with every tag, one client per host.

    Within one host, a blob another repository already received in this run is
    mounted from there instead of uploaded again.
    """

    registry_for: Callable[[str], Registry] = default_registry
    on_step: Step = lambda _: None
    _clients: dict[str, Registry] = field(default_factory=dict)
    _first_repo: dict[str, str] = field(default_factory=dict)

    def client(self, host: str) -> Registry:
        """The (shared) client for `host`."""
        if host not in self._clients:
            self._clients[host] = self.registry_for(host)
        return self._clients[host]

    def push(
        self,
        binary: str,
        layout: Path | LayoutImage,
        hubs: Iterable[str],
        tags: Sequence[str],
        *,
        variant: str = "",
    ) -> list[PushResult]:
        """Push `binary`'s layout to `<hub>/<binary>` for every hub, tagged with `tags`
        (suffixed `-<variant>` for an image variant, `variant_tags`)."""
        tags = variant_tags(tags, variant)
        image = layout if isinstance(layout, LayoutImage) else read_layout_image(layout)
        results: list[PushResult] = []
        for text in hubs:
            hub = parse_hub(text)
            repo = hub.repository(binary)
            mount = self._first_repo.setdefault(hub.host, repo)
            digest = push_layout(
                self.client(hub.host),
                repo,
                image,
                tags,
                mount_from=mount if mount != repo else None,
                on_step=self.on_step,
            )
            results.append(PushResult(str(hub), repo, digest, tuple(tags)))
        return results
