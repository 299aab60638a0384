"""Push OCI image layouts to registries: blobs, then manifests by digest, then tags.

The order is what makes a push safe to watch and to interrupt: every blob is in
the repository before a manifest names it, every platform manifest before the
index, and tags move last, so a tag never points at an incomplete index. Each
step checks first (HEAD) and skips what is there, so a second push uploads
nothing and a push killed half-way is finished by running it again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shipyard.errors import UsageError
from shipyard.oci.remote.auth import find_credentials
from shipyard.oci.remote.reference import validate_repository, validate_tag
from shipyard.oci.remote.registry import MEDIA_DOCKER_LIST, MEDIA_OCI_INDEX, Registry

__all__ = [
    "Hub",
    "LayoutBlob",
    "LayoutImage",
    "Publisher",
    "PushResult",
    "default_registry",
    "move_tags",
    "parse_hub",
    "push_layout",
    "read_layout_image",
]

_INDEX_TYPES = (MEDIA_OCI_INDEX, MEDIA_DOCKER_LIST)

Step = Callable[[str], None]
"""Progress callback: one line per step taken or skipped (the library never prints)."""


@dataclass(frozen=True)
class LayoutBlob:
    """A blob of an OCI layout: its digest, size and file."""

    digest: str
    size: int
    path: Path


@dataclass(frozen=True)
class LayoutImage:
    """What one layout holds, in push order: blobs, platform manifests, then the root."""

    blobs: tuple[LayoutBlob, ...]
    manifests: tuple[tuple[str, str, bytes], ...]  # (digest, media type, bytes)
    root: tuple[str, str, bytes]  # the index (or single manifest) the tags name
    platforms: tuple[str, ...]  # os/arch[/variant] of each platform manifest


def _blob_path(layout: Path, digest: str) -> Path:
    algorithm, _, hexdigest = digest.partition(":")
    path = layout / "blobs" / algorithm / hexdigest
    if not path.is_file():
        raise UsageError(f"{layout}: blob {digest} is missing; rebuild the image")
    return path


def _platform(desc: Mapping[str, Any]) -> str:
    plat = desc.get("platform") or {}
    parts = [str(plat.get("os", "?")), str(plat.get("architecture", "?"))]
    return "/".join(parts + ([str(plat["variant"])] if plat.get("variant") else []))


def read_layout_image(layout: Path) -> LayoutImage:
    """Read the layout at `layout`; its index.json must name exactly one image or index."""
    try:
        top = json.loads((layout / "index.json").read_bytes())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{layout}: not an OCI image layout ({exc}); build the image") from None
    entries = top.get("manifests") or []
    if len(entries) != 1:
        raise UsageError(f"{layout}/index.json: expected one entry, found {len(entries)}")
    root_desc = entries[0]
    root_bytes = _blob_path(layout, root_desc["digest"]).read_bytes()
    root = (str(root_desc["digest"]), str(root_desc["mediaType"]), root_bytes)
    is_index = root[1] in _INDEX_TYPES
    children = (json.loads(root_bytes).get("manifests") or []) if is_index else []
    manifests: list[tuple[str, str, bytes]] = []
    blobs: dict[str, LayoutBlob] = {}
    images = [(root_desc, root_bytes)] if not children else []
    for child in children:
        data = _blob_path(layout, child["digest"]).read_bytes()
        manifests.append((str(child["digest"]), str(child["mediaType"]), data))
        images.append((child, data))
    for _, data in images:
        doc = json.loads(data)
        for desc in [doc["config"], *doc.get("layers", [])]:
            digest = str(desc["digest"])
            blobs.setdefault(
                digest, LayoutBlob(digest, int(desc["size"]), _blob_path(layout, digest))
            )
    platforms = tuple(_platform(c) for c in children)
    return LayoutImage(tuple(blobs.values()), tuple(manifests), root, platforms)


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
        self, binary: str, layout: Path | LayoutImage, hubs: Iterable[str], tags: Sequence[str]
    ) -> list[PushResult]:
        """Push `binary`'s layout to `<hub>/<binary>` for every hub, tagged with `tags`."""
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
