"""Media types of both image families, OCI and Docker schema 2, and what each one is.

Registries and tools write either family: `docker push` and most public images
use Docker's types (manifest list, manifest, `container.image.v1` config,
`rootfs.diff` layers), buildkit, skopeo `--format oci` and shipyard write OCI's.
The bytes under a Docker and an OCI type of the same kind have the same shape,
so code asks what a descriptor is (`is_index`, `is_manifest`, `is_config`,
`is_layer`) and never compares against one family's literal. Shipyard writes
OCI types only. Parameters (`; charset=...`) are ignored by every predicate.
"""

from __future__ import annotations

__all__ = [
    "COSIGN_SIMPLE_SIGNING",
    "CYCLONEDX_JSON",
    "DOCKER_CONFIG",
    "DOCKER_FOREIGN_LAYER",
    "DOCKER_LAYER",
    "DOCKER_LIST",
    "DOCKER_MANIFEST",
    "DOCKER_MANIFEST_V1",
    "DOCKER_MANIFEST_V1_SIGNED",
    "DSSE_ENVELOPE",
    "IN_TOTO",
    "MANIFEST_TYPES",
    "OCI_CONFIG",
    "OCI_EMPTY",
    "OCI_INDEX",
    "OCI_LAYER",
    "OCI_LAYER_GZIP",
    "OCI_LAYER_NONDISTRIBUTABLE",
    "OCI_LAYER_NONDISTRIBUTABLE_GZIP",
    "OCI_LAYER_NONDISTRIBUTABLE_ZSTD",
    "OCI_LAYER_ZSTD",
    "OCI_MANIFEST",
    "OCTET_STREAM",
    "SHIPYARD_ACTION",
    "base_type",
    "is_config",
    "is_foreign_layer",
    "is_index",
    "is_layer",
    "is_manifest",
    "is_schema1",
    "oci_layer_type",
]

# OCI image spec v1.
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
# Deprecated by the spec, still found in Windows images: blobs that may live elsewhere (urls).
OCI_LAYER_NONDISTRIBUTABLE = "application/vnd.oci.image.layer.nondistributable.v1.tar"
OCI_LAYER_NONDISTRIBUTABLE_GZIP = OCI_LAYER_NONDISTRIBUTABLE + "+gzip"
OCI_LAYER_NONDISTRIBUTABLE_ZSTD = OCI_LAYER_NONDISTRIBUTABLE + "+zstd"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"

# Docker image manifest v2, schema 2 (and the schema 1 types, only to name them in errors).
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
DOCKER_FOREIGN_LAYER = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
DOCKER_MANIFEST_V1 = "application/vnd.docker.distribution.manifest.v1+json"
DOCKER_MANIFEST_V1_SIGNED = "application/vnd.docker.distribution.manifest.v1+prettyjws"

OCTET_STREAM = "application/octet-stream"
# shipyard's own: the config of a remote-cache entry (an OCI artifact).
SHIPYARD_ACTION = "application/vnd.shipyard.action.v1+json"
# Supply chain, as cosign attaches them to an image (sha256-<hex>.sig / .att): the
# simple-signing payload a signature covers, a DSSE envelope, and the in-toto
# Statement inside one (the envelope's payloadType).
COSIGN_SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
DSSE_ENVELOPE = "application/vnd.dsse.envelope.v1+json"
IN_TOTO = "application/vnd.in-toto+json"
# A CycloneDX JSON SBOM, as `cosign attach sbom --type cyclonedx` types its layer.
CYCLONEDX_JSON = "application/vnd.cyclonedx+json"

# What a client asks a registry's /manifests/ endpoint for (its Accept header).
MANIFEST_TYPES = (OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST)

_INDEXES = frozenset({OCI_INDEX, DOCKER_LIST})
_MANIFESTS = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
_CONFIGS = frozenset({OCI_CONFIG, DOCKER_CONFIG})
_FOREIGN = frozenset(
    {
        DOCKER_FOREIGN_LAYER,
        OCI_LAYER_NONDISTRIBUTABLE,
        OCI_LAYER_NONDISTRIBUTABLE_GZIP,
        OCI_LAYER_NONDISTRIBUTABLE_ZSTD,
    }
)
_LAYERS = _FOREIGN | {OCI_LAYER, OCI_LAYER_GZIP, OCI_LAYER_ZSTD, DOCKER_LAYER}
_SCHEMA1 = frozenset({DOCKER_MANIFEST_V1, DOCKER_MANIFEST_V1_SIGNED})


def base_type(media_type: str) -> str:
    """`media_type` without parameters or surrounding white space, as the predicates read it."""
    return media_type.partition(";")[0].strip()


def is_index(media_type: str) -> bool:
    """An OCI image index or a Docker manifest list (served from /manifests/)."""
    return base_type(media_type) in _INDEXES


def is_manifest(media_type: str) -> bool:
    """One platform's image manifest, OCI or Docker schema 2 (served from /manifests/)."""
    return base_type(media_type) in _MANIFESTS


def is_schema1(media_type: str) -> bool:
    """A Docker schema 1 manifest: obsolete, and not something shipyard reads."""
    return base_type(media_type) in _SCHEMA1


def is_config(media_type: str) -> bool:
    """An image config blob, OCI or Docker (`container.image.v1`); a blob, not a manifest."""
    return base_type(media_type) in _CONFIGS


def is_layer(media_type: str) -> bool:
    """A layer blob of either family: plain, gzip, zstd, or foreign/nondistributable."""
    return base_type(media_type) in _LAYERS


def is_foreign_layer(media_type: str) -> bool:
    """A layer the registry need not hold (Docker foreign, OCI nondistributable)."""
    return base_type(media_type) in _FOREIGN


def oci_layer_type(media_type: str) -> str:
    """The OCI type of a distributable layer: Docker's gzip layer is OCI's gzip layer."""
    kind = base_type(media_type)
    return OCI_LAYER_GZIP if kind == DOCKER_LAYER else kind
