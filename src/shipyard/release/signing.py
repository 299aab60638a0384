"""Image signatures in cosign's format: `sha256-<hex>.sig` manifests, pushed and verified.

An image digest is signed as `cosign sign --key` signs it: cosign's simple-signing
payload naming the repository and the digest, pushed as a layer of an OCI
manifest tagged `sha256-<hex>.sig` in the image's repository, the base64
signature in the layer's `dev.cosignproject.cosign/signature` annotation
(`cosign verify --key cosign.pub` checks it). The key itself and signed blobs
(`SHA256SUMS.sig`) are `keys`'.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from shipyard.oci.mediatypes import COSIGN_SIMPLE_SIGNING, OCI_CONFIG, OCI_MANIFEST
from shipyard.oci.remote.attach import attached_tag, attachment, push_attachment
from shipyard.oci.remote.reference import validate_digest, validate_repository
from shipyard.oci.remote.registry import NotFound, Registry, RegistryError
from shipyard.release.keys import SigningKey, VerifyError, sign_blob, verify_blob

__all__ = [
    "BLOB_LIMIT",
    "COSIGN_CONFIG_MEDIA_TYPE",
    "SIGNATURE_ANNOTATION",
    "SIMPLE_SIGNING_MEDIA_TYPE",
    "AttachedLayer",
    "LayerRef",
    "PushedSignature",
    "attached_layers",
    "attached_tag",
    "fetch_blob",
    "push_attached",
    "push_signature",
    "simple_signing_payload",
    "verify_image_signature",
]

SIMPLE_SIGNING_MEDIA_TYPE = COSIGN_SIMPLE_SIGNING
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
COSIGN_CONFIG_MEDIA_TYPE = OCI_CONFIG
_SIMPLE_SIGNING_TYPE = "cosign container image signature"
BLOB_LIMIT = 16 << 20


def simple_signing_payload(docker_reference: str, digest: str) -> bytes:
    """cosign's simple-signing payload for `digest` in the repository `docker_reference`.

    `docker_reference` is `host[:port]/repository` (no tag); the bytes are the
    compact JSON cosign writes, and are what the signature covers.
    """
    validate_digest(digest)
    body = {
        "critical": {
            "identity": {"docker-reference": docker_reference},
            "image": {"docker-manifest-digest": digest},
            "type": _SIMPLE_SIGNING_TYPE,
        },
        "optional": None,
    }
    return json.dumps(body, separators=(",", ":")).encode()


@dataclass(frozen=True)
class AttachedLayer:
    """One layer of a cosign `.sig`/`.att` manifest: its bytes, media type and annotations."""

    data: bytes
    media_type: str
    annotations: Mapping[str, str]

    @property
    def digest(self) -> str:
        """sha256 of the bytes."""
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def descriptor(self) -> dict[str, Any]:
        """The layer's descriptor in the manifest."""
        return {
            "mediaType": self.media_type,
            "size": len(self.data),
            "digest": self.digest,
            "annotations": dict(self.annotations),
        }


@dataclass(frozen=True)
class PushedSignature:
    """What pushing a signature or attestation did: the tag, its manifest, whether new."""

    repository: str
    tag: str
    digest: str
    pushed: bool  # False: the tag already held this layer (a resumed publish)


def fetch_blob(
    registry: Registry, repo: str, digest: object, size: object, *, limit: int = BLOB_LIMIT
) -> bytes:
    """The bytes of a small blob a manifest's descriptor names, checked against its digest.

    `size` is the descriptor's: a blob said to be over `limit` is refused before any
    byte is fetched, and the download stops at the first byte past `size` (a registry
    cannot stream gigabytes behind a descriptor of 180 bytes). VerifyError otherwise.
    """
    where = f"{registry.host}/{repo}@{digest}"
    if not isinstance(digest, str) or not _is_sha256(digest):
        raise VerifyError(f"{registry.host}/{repo}: a layer's digest {digest!r} is not sha256")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise VerifyError(f"{where}: the layer's size {size!r} is not a byte count")
    if size > limit:
        raise VerifyError(f"{where} is {size} bytes, over the {limit} a signature may have")
    with tempfile.TemporaryDirectory(prefix="shipyard-sig-") as tmp:
        path = Path(tmp) / "blob"
        try:
            registry.pull_blob(repo, digest, path, size=size)
        except RegistryError as exc:
            raise VerifyError(f"{where}: {exc}") from None
        return path.read_bytes()


def _is_sha256(digest: str) -> bool:
    algorithm, _, hexpart = digest.partition(":")
    return algorithm == "sha256" and len(hexpart) == 64 and set(hexpart) <= set("0123456789abcdef")


@dataclass(frozen=True)
class LayerRef:
    """A layer descriptor of a `.sig`/`.att` manifest, read strictly from the registry."""

    media_type: str
    digest: str
    size: int
    annotations: Mapping[str, str]


def attached_layers(registry: Registry, repo: str, tag: str) -> list[LayerRef] | None:
    """The layers of the cosign manifest at `tag`, or None when the tag is absent.

    Every part a verifier reads is checked for its type: a manifest that is not a
    JSON object, a layer that is not one, a digest, size or annotation of the wrong
    kind is a VerifyError naming the tag (never an exception of another kind).
    """
    where = f"{registry.host}/{repo}:{tag}"
    try:
        if registry.manifest_exists(repo, tag) is None:
            return None
        data, _, _ = registry.get_manifest(repo, tag, accept=(OCI_MANIFEST,))
    except NotFound:
        return None
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        raise VerifyError(f"{where}: the manifest is not JSON") from None
    layers = document.get("layers") if isinstance(document, dict) else None
    if not isinstance(layers, list):
        raise VerifyError(f"{where}: the manifest has no list of layers")
    found = []
    for number, desc in enumerate(layers):
        if not isinstance(desc, dict):
            raise VerifyError(f"{where}: layer {number} is not an object")
        media_type, digest, size = desc.get("mediaType"), desc.get("digest"), desc.get("size")
        annotations = desc.get("annotations") or {}
        if not isinstance(media_type, str) or not isinstance(digest, str):
            raise VerifyError(f"{where}: layer {number} lacks its media type or digest")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise VerifyError(f"{where}: layer {number}'s size {size!r} is not a byte count")
        if not isinstance(annotations, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()
        ):
            raise VerifyError(f"{where}: layer {number}'s annotations are not strings")
        found.append(LayerRef(media_type, digest, size, annotations))
    return found


def _existing_layers(registry: Registry, repo: str, tag: str) -> tuple[list[dict[str, Any]], str]:
    """The layers of the manifest at `tag` (none when absent) and its digest ("" if none)."""
    if registry.manifest_exists(repo, tag) is None:
        return [], ""
    data, _, digest = registry.get_manifest(repo, tag, accept=(OCI_MANIFEST,))
    try:
        layers = json.loads(data).get("layers") or []
    except (ValueError, AttributeError, RecursionError):
        layers = []
    return [layer for layer in layers if isinstance(layer, dict)], digest


def push_attached(
    registry: Registry,
    repo: str,
    digest: str,
    suffix: str,
    layer: AttachedLayer,
    *,
    have: Callable[[dict[str, Any]], bool] | None = None,
    on_step: Callable[[str], None] = lambda _: None,
) -> PushedSignature:
    """Attach `layer` to the image `digest` in `repo` under `sha256-<hex>.<suffix>`.

    As cosign does: the layer is added to the manifest already at that tag (other
    signatures stay), with a near-empty config. When a layer there already counts
    as this one (`have(descriptor)`; by default the same digest) nothing is pushed.
    """
    validate_repository(repo)
    tag = attached_tag(digest, suffix)
    where = f"{registry.host}/{repo}:{tag}"
    layers, found = _existing_layers(registry, repo, tag)
    same = have or (lambda desc: desc.get("digest") == layer.digest)
    if any(same(desc) for desc in layers):
        on_step(f"have {where}")
        return PushedSignature(repo, tag, found, pushed=False)
    made = attachment([*layers, layer.descriptor()], {layer.digest: layer.data})
    push_attachment(registry, repo, tag, made, on_step=on_step, verb="pushed")
    pushed = made.digest
    return PushedSignature(repo, tag, pushed, pushed=True)


def push_signature(
    registry: Registry,
    repo: str,
    digest: str,
    key: SigningKey,
    *,
    on_step: Callable[[str], None] = lambda _: None,
) -> PushedSignature:
    """Sign the image `digest` in `repo` on `registry` the way `cosign sign --key` does.

    The payload names `<registry host>/<repo>` and `digest`. Idempotent: when the
    `.sig` manifest already holds this payload signed by this key, nothing is pushed.
    """
    payload = simple_signing_payload(f"{registry.host}/{repo}", digest)
    signature = base64.b64encode(sign_blob(key, payload)).decode()
    layer = AttachedLayer(payload, SIMPLE_SIGNING_MEDIA_TYPE, {SIGNATURE_ANNOTATION: signature})

    def signed_by_us(desc: dict[str, Any]) -> bool:
        if desc.get("digest") != layer.digest:
            return False
        theirs = desc.get("annotations") or {}
        encoded = theirs.get(SIGNATURE_ANNOTATION, "") if isinstance(theirs, dict) else ""
        try:
            return verify_blob(key.public, payload, base64.b64decode(encoded, validate=True))
        except (binascii.Error, ValueError, TypeError):
            return False

    return push_attached(registry, repo, digest, "sig", layer, have=signed_by_us, on_step=on_step)


def verify_image_signature(
    registry: Registry, repo: str, digest: str, public: ec.EllipticCurvePublicKey
) -> bytes:
    """Check the cosign signature of the image `digest` in `repo`; return the payload.

    Fetches the `sha256-<hex>.sig` manifest and accepts the first simple-signing
    layer whose annotation signs the exact payload bytes under `public` and whose
    payload names `digest` and this repository. VerifyError naming the first
    mismatch otherwise.
    """
    tag = attached_tag(digest, "sig")
    where = f"{registry.host}/{repo}:{tag}"
    layers = attached_layers(registry, repo, tag)
    if not layers:
        raise VerifyError(f"{registry.host}/{repo}@{digest} is not signed: no {tag}")
    problems: list[str] = []
    for layer in layers:
        if layer.media_type != SIMPLE_SIGNING_MEDIA_TYPE:
            continue
        payload = fetch_blob(registry, repo, layer.digest, layer.size)
        encoded = layer.annotations.get(SIGNATURE_ANNOTATION, "")
        try:
            signature = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            problems.append(f"{where}: layer {layer.digest}'s signature is not base64")
            continue
        if not verify_blob(public, payload, signature):
            problems.append(
                f"{where}: the signature of layer {layer.digest} does not verify its "
                "payload with the given key"
            )
            continue
        problem = _payload_problem(payload, f"{registry.host}/{repo}", digest)
        if problem:
            problems.append(f"{where}: {problem}")
            continue
        return payload
    raise VerifyError(problems[0] if problems else f"{where} holds no simple-signing layer")


def _payload_problem(payload: bytes, reference: str, digest: str) -> str | None:
    try:
        critical = json.loads(payload)["critical"]
        named = critical["image"]["docker-manifest-digest"]
        identity = critical["identity"]["docker-reference"]
        kind = critical["type"]
    except (ValueError, KeyError, TypeError):
        return "the signed payload is not a cosign simple-signing payload"
    if kind != _SIMPLE_SIGNING_TYPE:
        return f"the signed payload's type is {kind!r}, not {_SIMPLE_SIGNING_TYPE!r}"
    if named != digest:
        return f"the signed payload names {named}, not the image's {digest}"
    if identity != reference:
        return f"the signed payload names the repository {identity}, not {reference}"
    return None
