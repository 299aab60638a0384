"""SLSA v1 provenance of a release: an in-toto Statement in a signed DSSE envelope.

The statement's subjects are every file artifact of release.json (by sha256) and
every image (by the digest of its index); its build definition names the
manifest's digest, the lock's digest, the git revision and dirty flag, shipyard's
version and the release's parameters. The envelope is signed over DSSE's
pre-authentication encoding (PAE) with the release's signing key, so
`cosign verify-attestation` and any DSSE library check it. It is staged as one
line of `provenance.intoto.jsonl` and attached to each image as
`sha256-<hex>.att`, the way `cosign attest` does.

A staged folder's provenance is checked with the rest of the folder, by
`shipyard.release.verification`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from shipyard import __version__
from shipyard._fs import atomic_write
from shipyard.oci.mediatypes import DSSE_ENVELOPE, IN_TOTO
from shipyard.oci.remote.registry import Registry
from shipyard.release.keys import SigningKey, VerifyError, sign_blob, verify_blob
from shipyard.release.signing import (
    SIGNATURE_ANNOTATION,
    AttachedLayer,
    PushedSignature,
    attached_layers,
    attached_tag,
    fetch_blob,
    push_attached,
)
from shipyard.release.staged import PROVENANCE_FILE, StagedImage, StagedRelease

__all__ = [
    "BUILDER_ID",
    "BUILD_TYPE",
    "DSSE_MEDIA_TYPE",
    "INTOTO_PAYLOAD_TYPE",
    "PROVENANCE_FILE",
    "SLSA_PREDICATE",
    "STATEMENT_TYPE",
    "Subject",
    "dsse_pae",
    "expected_subjects",
    "lock_file",
    "provenance_statement",
    "push_attestation",
    "read_provenance",
    "sign_envelope",
    "subject_set",
    "verify_envelope",
    "verify_image_attestation",
    "write_provenance",
]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
SLSA_PREDICATE = "https://slsa.dev/provenance/v1"
INTOTO_PAYLOAD_TYPE = IN_TOTO
DSSE_MEDIA_TYPE = DSSE_ENVELOPE
BUILD_TYPE = "https://shipyard.dev/provenance/release/v1"
BUILDER_ID = "https://shipyard.dev/builder/shipyard-release"
_PREDICATE_ANNOTATION = "predicateType"
# Lock files, in the order looked for beside the manifest.
_LOCKS = ("uv.lock", "requirements.lock", "requirements.txt")


def _digest(data: bytes) -> dict[str, str]:
    return {"sha256": hashlib.sha256(data).hexdigest()}


@dataclass(frozen=True, order=True)
class Subject:
    """An in-toto subject: what the provenance vouches for, by name and digest."""

    name: str
    algorithm: str
    hexdigest: str

    def to_json(self) -> dict[str, object]:
        """The subject as an in-toto Statement holds it."""
        return {"name": self.name, "digest": {self.algorithm: self.hexdigest}}


def expected_subjects(staged: StagedRelease) -> list[Subject]:
    """The subjects release.json calls for: each file artifact by path and sha256, each
    image as `<first hub>/<binary>:<first tag>` (or its path) by its index digest."""
    subjects: list[Subject] = []
    for art in staged.listed():
        if isinstance(art, StagedImage):
            algorithm, _, hexpart = art.digest.partition(":")
            name = f"{art.hubs[0]}/{art.binary}" if art.hubs and art.binary else art.path
            name += f":{art.tags[0]}" if art.tags and art.hubs else ""
            subjects.append(Subject(name, algorithm, hexpart))
        else:
            subjects.append(Subject(art.path, "sha256", art.sha256))
    return subjects


def lock_file(root: Path) -> Path | None:
    """The lock beside the manifest: uv.lock, else requirements.lock / requirements.txt."""
    return next((root / name for name in _LOCKS if (root / name).is_file()), None)


def _dependencies(
    manifest_path: Path, lock: Path | None, revision: object, dirty: bool
) -> list[dict[str, Any]]:
    """The resolved dependencies: the manifest, the lock, the git source."""
    found: list[dict[str, Any]] = [
        {"name": manifest_path.name, "digest": _digest(manifest_path.read_bytes())}
    ]
    if lock is not None:
        found.append({"name": lock.name, "digest": _digest(lock.read_bytes())})
    if revision:
        found.append(
            {"name": "source", "digest": {"gitCommit": revision}, "annotations": {"dirty": dirty}}
        )
    return found


def provenance_statement(
    staged: StagedRelease,
    *,
    manifest_path: Path,
    parameters: Mapping[str, Any],
    lock: Path | None = None,
    shipyard_version: str = __version__,
    finished: str | None = None,
) -> dict[str, Any]:
    """The SLSA v1 provenance Statement of the staged release `staged` (release.json).

    `parameters` are the release's external parameters (version, selection, flags);
    `lock` defaults to `lock_file(manifest_path.parent)`. The git revision and dirty
    flag come from release.json's `build`; `finished` (RFC 3339) is optional.
    """
    build = staged.build
    revision = build.get("revision") or staged.revision
    dirty = bool(build.get("dirty", False))
    lock = lock if lock is not None else lock_file(manifest_path.parent)
    dependencies = _dependencies(manifest_path, lock, revision, dirty)
    metadata: dict[str, Any] = {"invocationId": f"{staged.project}@{staged.version}"}
    if build.get("created"):
        metadata["startedOn"] = build["created"]
    if finished:
        metadata["finishedOn"] = finished
    return {
        "_type": STATEMENT_TYPE,
        "subject": [subject.to_json() for subject in expected_subjects(staged)],
        "predicateType": SLSA_PREDICATE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "project": staged.project,
                    "version": staged.version,
                    **dict(parameters),
                },
                "internalParameters": {
                    "shipyardVersion": shipyard_version,
                    "manifestDigest": dependencies[0]["digest"],
                    "lockDigest": dependencies[1]["digest"] if lock is not None else None,
                    "gitRevision": revision,
                    "dirty": dirty,
                },
                "resolvedDependencies": dependencies,
            },
            "runDetails": {
                "builder": {"id": BUILDER_ID, "version": {"shipyard": shipyard_version}},
                "metadata": metadata,
            },
        },
    }


def dsse_pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what the envelope's signature covers."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def sign_envelope(
    payload: bytes, key: SigningKey, payload_type: str = INTOTO_PAYLOAD_TYPE
) -> dict[str, Any]:
    """A DSSE envelope of `payload` signed (ECDSA-SHA256 over the PAE) with `key`.

    The signature's keyid is empty, as `cosign attest --key` writes it.
    """
    signature = sign_blob(key, dsse_pae(payload_type, payload))
    return {
        "payloadType": payload_type,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [{"keyid": "", "sig": base64.b64encode(signature).decode()}],
    }


def verify_envelope(
    envelope: Mapping[str, Any], public: ec.EllipticCurvePublicKey, where: str
) -> dict[str, Any]:
    """Check a DSSE envelope of an in-toto Statement signed by `public`; the Statement.

    VerifyError naming `where` when no signature verifies the PAE or the payload is
    not an in-toto Statement.
    """
    try:
        payload_type = str(envelope["payloadType"])
        payload = base64.b64decode(envelope["payload"], validate=True)
        signatures = [base64.b64decode(s["sig"], validate=True) for s in envelope["signatures"]]
    except (KeyError, TypeError, binascii.Error, ValueError):
        raise VerifyError(f"{where}: not a DSSE envelope") from None
    if payload_type != INTOTO_PAYLOAD_TYPE:
        raise VerifyError(f"{where}: payloadType is {payload_type!r}, not {INTOTO_PAYLOAD_TYPE}")
    pae = dsse_pae(payload_type, payload)
    if not any(verify_blob(public, pae, sig) for sig in signatures):
        raise VerifyError(f"{where}: the envelope's signature does not verify with the given key")
    try:
        statement = json.loads(payload)
    except ValueError:
        raise VerifyError(f"{where}: the signed payload is not JSON") from None
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise VerifyError(f"{where}: the signed payload is not an in-toto Statement v1")
    return statement


def write_provenance(folder: Path, statement: Mapping[str, Any], key: SigningKey) -> Path:
    """Sign `statement` and write its envelope as one line of `folder/provenance.intoto.jsonl`.

    Publish pushes the staged line's bytes (`read_provenance`), so a resumed
    publish attaches exactly the same envelope.
    """
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    envelope = sign_envelope(payload, key)
    target = folder / PROVENANCE_FILE
    atomic_write(target, json.dumps(envelope, separators=(",", ":")).encode() + b"\n")
    return target


def read_provenance(folder: Path) -> list[bytes]:
    """The envelopes staged in `folder/provenance.intoto.jsonl`, one per line, as bytes."""
    path = folder / PROVENANCE_FILE
    return [line for line in path.read_bytes().splitlines() if line.strip()]


def push_attestation(
    registry: Registry,
    repo: str,
    digest: str,
    envelope: bytes,
    *,
    predicate_type: str = SLSA_PREDICATE,
    on_step: Callable[[str], None] = lambda _: None,
) -> PushedSignature:
    """Attach the DSSE `envelope` bytes to the image `digest` as `sha256-<hex>.att`.

    cosign's layout: a layer of media type DSSE_ENVELOPE (a DSSE envelope)
    with the `predicateType` annotation, added to what the tag holds. Idempotent: a
    layer with the same bytes already there is success.
    """
    layer = AttachedLayer(
        envelope,
        DSSE_MEDIA_TYPE,
        {SIGNATURE_ANNOTATION: "", _PREDICATE_ANNOTATION: predicate_type},
    )
    return push_attached(registry, repo, digest, "att", layer, on_step=on_step)


def subject_set(subjects: object) -> set[tuple[str, str, str]]:
    """In-toto subjects as (name, algorithm, digest) triples; malformed entries count as none."""
    found: set[tuple[str, str, str]] = set()
    for subject in subjects if isinstance(subjects, list) else []:
        digests = subject.get("digest") if isinstance(subject, dict) else None
        for algorithm, value in (digests if isinstance(digests, dict) else {}).items():
            found.add((str(subject.get("name")), str(algorithm), str(value)))
    return found


def _names_digest(statement: Mapping[str, Any], digest: str) -> bool:
    algorithm, _, hexpart = digest.partition(":")
    return any(a == algorithm and v == hexpart for _, a, v in subject_set(statement.get("subject")))


def verify_image_attestation(
    registry: Registry, repo: str, digest: str, public: ec.EllipticCurvePublicKey
) -> dict[str, Any] | None:
    """Check the `.att` of the image `digest` in `repo`, if it has one; its Statement.

    None when there is no `.att`. Each DSSE layer must verify under `public` and
    its Statement must list `digest` among its subjects; else VerifyError, for a
    malformed manifest too (`attached_layers` checks every part it reads).
    """
    tag = attached_tag(digest, "att")
    where = f"{registry.host}/{repo}:{tag}"
    layers = attached_layers(registry, repo, tag)
    if layers is None:
        return None
    statement: dict[str, Any] | None = None
    for layer in layers:
        if layer.media_type != DSSE_MEDIA_TYPE:
            continue
        blob = fetch_blob(registry, repo, layer.digest, layer.size)
        try:
            envelope = json.loads(blob)
        except (ValueError, RecursionError):
            raise VerifyError(f"{where}: layer {layer.digest} is not JSON") from None
        if not isinstance(envelope, dict):
            raise VerifyError(f"{where}: layer {layer.digest} is not a DSSE envelope")
        statement = verify_envelope(envelope, public, f"{where} layer {layer.digest}")
        if not _names_digest(statement, digest):
            raise VerifyError(f"{where}: the attestation's subjects do not name {digest}")
    if statement is None:
        raise VerifyError(f"{where} holds no DSSE envelope")
    return statement
