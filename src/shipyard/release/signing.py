"""Signatures in cosign's format: the signing key, signed blobs and `sha256-<hex>.sig` manifests.

A key is a PEM ECDSA P-256 private key (PKCS#8 or SEC1, as `shipyard keygen` and
`openssl` write them), from `--signing-key PATH` or `$SHIPYARD_SIGNING_KEY`. The
variable holds a path, or the PEM text itself (a CI secret): a value that starts
with `-----BEGIN` is read as the key. An encrypted key's password comes from
`$SHIPYARD_SIGNING_KEY_PASSWORD`. Messages name where a key came from, never what
it holds.

What is signed, and how standard tools check it:

- a blob (`SHA256SUMS`): the DER ECDSA-SHA256 signature, base64 in `SHA256SUMS.sig`,
  as `cosign sign-blob` writes it; `openssl dgst -sha256 -verify cosign.pub
  -signature <(base64 -d SHA256SUMS.sig) SHA256SUMS` checks it;
- an image digest: cosign's simple-signing payload naming the repository and the
  digest, pushed as the one layer of an OCI manifest tagged `sha256-<hex>.sig` in the
  image's repository, the base64 signature in the layer's
  `dev.cosignproject.cosign/signature` annotation (`cosign verify --key cosign.pub`).

Signatures are deterministic (RFC 6979) where the OpenSSL underneath can, so signing
the same bytes again gives the same signature.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from shipyard._fs import atomic_write
from shipyard.errors import ShipyardError, UsageError
from shipyard.oci.mediatypes import COSIGN_SIMPLE_SIGNING, OCI_CONFIG, OCI_MANIFEST
from shipyard.oci.remote.attach import attached_tag, attachment, push_attachment
from shipyard.oci.remote.reference import validate_digest, validate_repository
from shipyard.oci.remote.registry import NotFound, Registry, RegistryError
from shipyard.release.staged import SUMS, SUMS_SIG

__all__ = [
    "BLOB_LIMIT",
    "COSIGN_CONFIG_MEDIA_TYPE",
    "KEY_ENV",
    "PASSWORD_ENV",
    "SIGNATURE_ANNOTATION",
    "SIMPLE_SIGNING_MEDIA_TYPE",
    "SUMS_SIG",
    "AttachedLayer",
    "LayerRef",
    "PushedSignature",
    "SigningKey",
    "VerifyError",
    "attached_layers",
    "attached_tag",
    "fetch_blob",
    "generate_keypair",
    "load_public_key",
    "load_signing_key",
    "parse_signing_key",
    "push_attached",
    "push_signature",
    "read_capped",
    "sign_blob",
    "sign_sums",
    "simple_signing_payload",
    "verify_blob",
    "verify_image_signature",
    "verify_sums",
]

KEY_ENV = "SHIPYARD_SIGNING_KEY"
PASSWORD_ENV = "SHIPYARD_SIGNING_KEY_PASSWORD"
SIMPLE_SIGNING_MEDIA_TYPE = COSIGN_SIMPLE_SIGNING
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
COSIGN_CONFIG_MEDIA_TYPE = OCI_CONFIG
_SIMPLE_SIGNING_TYPE = "cosign container image signature"
_PEM_START = "-----BEGIN"
_KEYGEN_HINT = "write a pair with `shipyard keygen`"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # opening a FIFO must not wait for a writer
# The most a signature, SBOM or attestation layer fetched for checking may hold.
BLOB_LIMIT = 16 << 20
# The most SHA256SUMS and SHA256SUMS.sig may hold: far above any real release's.
SUMS_LIMIT = 16 << 20
SIG_LIMIT = 64 << 10


class VerifyError(ShipyardError):
    """A signature, digest or checksum does not match: names the first mismatch (exit 1)."""


@dataclass(frozen=True, repr=False)
class SigningKey:
    """An ECDSA P-256 private key and where it came from (for messages; never its bytes)."""

    private: ec.EllipticCurvePrivateKey
    source: str

    def __repr__(self) -> str:
        return f"SigningKey(source={self.source!r})"

    @property
    def public(self) -> ec.EllipticCurvePublicKey:
        """The public half."""
        return self.private.public_key()

    def public_pem(self) -> bytes:
        """The public key as PEM SubjectPublicKeyInfo, as `cosign.pub` holds it."""
        return self.public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


def _is_p256(key: object) -> bool:
    return isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey) and isinstance(
        key.curve, ec.SECP256R1
    )


def parse_signing_key(data: bytes, source: str, password: bytes | None = None) -> SigningKey:
    """The ECDSA P-256 private key in PEM `data`; UsageError naming `source` otherwise.

    `source` says where the bytes came from (a path, or the variable's name); the
    error never quotes the bytes.
    """
    if b"ENCRYPTED SIGSTORE PRIVATE KEY" in data or b"ENCRYPTED COSIGN PRIVATE KEY" in data:
        raise UsageError(
            f"{source}: a key in cosign's own encrypted format is not read; give a PEM "
            f"ECDSA P-256 key ({_KEYGEN_HINT}, or `openssl ecparam -name prime256v1 -genkey "
            "-noout | openssl pkcs8 -topk8 -nocrypt`)"
        )
    try:
        key = serialization.load_pem_private_key(data, password=password)
    except TypeError:
        if password is None:
            raise UsageError(
                f"{source}: the private key is encrypted; set {PASSWORD_ENV} to its password"
            ) from None
        raise UsageError(
            f"{source}: the private key is not encrypted, but {PASSWORD_ENV} is set; unset it"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        wrong = " or the password in " + PASSWORD_ENV + " is wrong" if password else ""
        raise UsageError(
            f"{source}: not a PEM private key{wrong}; give a PEM ECDSA P-256 key ({_KEYGEN_HINT})"
        ) from None
    if not _is_p256(key):
        raise UsageError(
            f"{source}: the key is not ECDSA P-256 (prime256v1), which cosign's signatures "
            f"use; {_KEYGEN_HINT}"
        )
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return SigningKey(key, source)


def load_signing_key(
    path: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> SigningKey | None:
    """The key from `path` (`--signing-key`), else `$SHIPYARD_SIGNING_KEY`; None if neither.

    The variable holds a path or the PEM text; `$SHIPYARD_SIGNING_KEY_PASSWORD`
    decrypts an encrypted key. A missing file, an unreadable or wrong key is a
    UsageError (exit 2) naming the flag or variable and the fix.
    """
    env = os.environ if environ is None else environ
    password_text = env.get(PASSWORD_ENV)
    password = password_text.encode() if password_text else None
    if path is not None:
        text = str(path)
        # Key text passed where a path belongs is named, never echoed.
        shown = "(a value that is no path)" if "\n" in text or "KEY-----" in text else text
        where = f"--signing-key {shown}"
        return parse_signing_key(_read_key_file(Path(path), where), where, password)
    value = env.get(KEY_ENV, "")
    if not value.strip():
        return None
    if value.lstrip().startswith(_PEM_START):
        return parse_signing_key(value.encode(), f"${KEY_ENV} (PEM text)", password)
    try:
        found = "\n" not in value and Path(value).is_file()
    except (OSError, ValueError):  # a name too long for a path: key text, likely
        found = False
    if not found:
        # Not shown: a value that is no file may well be key material pasted badly.
        raise UsageError(
            f"${KEY_ENV} names no file (its value is not shown); set it to the path of a PEM "
            f"ECDSA P-256 private key, or to the PEM text itself; {_KEYGEN_HINT}"
        )
    where = f"${KEY_ENV}={value!r}"
    return parse_signing_key(_read_key_file(Path(value), where), where, password)


def _read_key_file(path: Path, where: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{where}: no such file; {_KEYGEN_HINT} and pass its .key") from None
    except OSError as exc:
        raise UsageError(f"{where}: cannot read the key ({exc.strerror})") from None


def load_public_key(path: Path, where: str | None = None) -> ec.EllipticCurvePublicKey:
    """The ECDSA P-256 public key in the PEM file `path` (`cosign.pub`); else UsageError."""
    where = where or f"--key {path}"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{where}: cannot read the public key ({exc.strerror})") from None
    if b"PRIVATE KEY" in data:
        raise UsageError(f"{where}: this is a private key; pass the public one (cosign.pub)")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise UsageError(f"{where}: not a PEM public key; pass the .pub of the pair") from None
    if not _is_p256(key):
        raise UsageError(f"{where}: the public key is not ECDSA P-256 (prime256v1)")
    assert isinstance(key, ec.EllipticCurvePublicKey)
    return key


def generate_keypair(private_path: Path, public_path: Path) -> SigningKey:
    """Write a new ECDSA P-256 pair: PKCS#8 PEM private key (mode 0600), PEM public key.

    Refuses (UsageError) to overwrite either file. The private key is created with
    mode 0600 from the start, never readable by others even for a moment.
    """
    for path in (private_path, public_path):
        if path.exists() or path.is_symlink():
            raise UsageError(f"{path} already exists; remove it or choose another --out")
    private = ec.generate_private_key(ec.SECP256R1())
    key = SigningKey(private, str(private_path))
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    private_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, pem)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        public_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(public_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with open(fd, "wb") as handle:
            handle.write(key.public_pem())
    except BaseException:
        private_path.unlink(missing_ok=True)
        raise
    return key


def sign_blob(key: SigningKey, data: bytes) -> bytes:
    """The DER ECDSA-SHA256 signature of `data` (deterministic where OpenSSL allows)."""
    try:
        return key.private.sign(data, ec.ECDSA(hashes.SHA256(), deterministic_signing=True))
    except UnsupportedAlgorithm:
        return key.private.sign(data, ec.ECDSA(hashes.SHA256()))


def verify_blob(public: ec.EllipticCurvePublicKey, data: bytes, signature: bytes) -> bool:
    """True if `signature` (DER ECDSA-SHA256) signs `data` under `public`."""
    try:
        public.verify(signature, data, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


def sign_sums(folder: Path, key: SigningKey) -> Path:
    """Write `folder/SHA256SUMS.sig`: the base64 DER signature of `folder/SHA256SUMS`.

    As `cosign sign-blob --key` writes it. Call it after SHA256SUMS is final; the
    .sig itself is not listed in SHA256SUMS.
    """
    signature = base64.b64encode(sign_blob(key, (folder / SUMS).read_bytes()))
    target = folder / SUMS_SIG
    atomic_write(target, signature)
    return target


def _b64decode(text: str | bytes, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise VerifyError(f"{what} is not base64") from None


def read_capped(path: Path, limit: int) -> bytes:
    """The bytes of the regular file `path`, never through a symlink; VerifyError when
    it is missing, not a regular file, or larger than `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK)  # a FIFO: no hang
    except FileNotFoundError:
        raise VerifyError(f"{path} is missing") from None
    except OSError as exc:  # ELOOP: a symlink
        raise VerifyError(f"{path} cannot be read ({exc.strerror}); it must be a file") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise VerifyError(f"{path} is not a regular file")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise VerifyError(f"{path} is larger than {limit} bytes; it is no file shipyard wrote")
    return data


def verify_sums(folder: Path, public: ec.EllipticCurvePublicKey) -> bytes:
    """Check SHA256SUMS.sig over SHA256SUMS; the verified SHA256SUMS bytes.

    Both are read without following symlinks and with a size cap. VerifyError
    naming the file on a mismatch.
    """
    sums, sig = folder / SUMS, folder / SUMS_SIG
    for path in (sums, sig):
        if not path.is_file() and not path.is_symlink():
            raise VerifyError(f"{path} is missing: the release is not signed")
    data = read_capped(sums, SUMS_LIMIT)
    signature = _b64decode(read_capped(sig, SIG_LIMIT).strip(), str(sig))
    if not verify_blob(public, data, signature):
        raise VerifyError(f"{sig} does not verify {sums} with the given key")
    return data


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
