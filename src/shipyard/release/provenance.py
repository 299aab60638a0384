"""SLSA v1 provenance of a release: an in-toto Statement in a signed DSSE envelope.

The statement's subjects are every file artifact of release.json (by sha256) and
every image (by the digest of its index); its build definition names the
manifest's digest, the lock's digest, the git revision and dirty flag, shipyard's
version and the release's parameters. The envelope is signed over DSSE's
pre-authentication encoding (PAE) with the release's signing key, so
`cosign verify-attestation` and any DSSE library check it. It is staged as one
line of `provenance.intoto.jsonl` and attached to each image as
`sha256-<hex>.att`, the way `cosign attest` does.

`verify_release` checks a staged folder: SHA256SUMS.sig, every file against
SHA256SUMS, and the provenance's signature and subjects against release.json.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from shipyard import __version__
from shipyard._fs import atomic_write, sha256_file
from shipyard.oci.mediatypes import DSSE_ENVELOPE, IN_TOTO
from shipyard.oci.remote.registry import NotFound, Registry
from shipyard.release.signing import (
    SIGNATURE_ANNOTATION,
    SUMS,
    SUMS_SIG,
    AttachedLayer,
    PushedSignature,
    SigningKey,
    VerifyError,
    attached_tag,
    fetch_blob,
    push_attached,
    sign_blob,
    verify_blob,
    verify_sums,
)

__all__ = [
    "BUILDER_ID",
    "BUILD_TYPE",
    "DSSE_MEDIA_TYPE",
    "INTOTO_PAYLOAD_TYPE",
    "PROVENANCE_FILE",
    "SLSA_PREDICATE",
    "STATEMENT_TYPE",
    "dsse_pae",
    "expected_subjects",
    "lock_file",
    "provenance_statement",
    "push_attestation",
    "read_provenance",
    "sign_envelope",
    "verify_envelope",
    "verify_image_attestation",
    "verify_release",
    "write_provenance",
]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
SLSA_PREDICATE = "https://slsa.dev/provenance/v1"
INTOTO_PAYLOAD_TYPE = IN_TOTO
DSSE_MEDIA_TYPE = DSSE_ENVELOPE
BUILD_TYPE = "https://shipyard.dev/provenance/release/v1"
BUILDER_ID = "https://shipyard.dev/builder/shipyard-release"
PROVENANCE_FILE = "provenance.intoto.jsonl"
RELEASE_JSON = "release.json"  # staging.RELEASE_JSON (staging loads the builders)
_JOURNAL = "publish.journal"  # journal.JOURNAL_NAME
_PREDICATE_ANNOTATION = "predicateType"
# Lock files, in the order looked for beside the manifest.
_LOCKS = ("uv.lock", "requirements.lock", "requirements.txt")


def _digest(data: bytes) -> dict[str, str]:
    return {"sha256": hashlib.sha256(data).hexdigest()}


def expected_subjects(staged: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The subjects release.json calls for: each file artifact by path and sha256, each
    image as `<first hub>/<binary>:<first tag>` (or its path) by its index digest."""
    subjects: list[dict[str, Any]] = []
    for art in staged.get("artifacts", []):
        if art.get("kind") == "image":
            algorithm, _, hexpart = str(art.get("digest", "")).partition(":")
            hubs, tags = art.get("hubs") or [], art.get("tags") or []
            name = f"{hubs[0]}/{art['binary']}" if hubs and art.get("binary") else art["path"]
            name += f":{tags[0]}" if tags and hubs else ""
            subjects.append({"name": name, "digest": {algorithm: hexpart}})
        elif "sha256" in art:
            subjects.append({"name": art["path"], "digest": {"sha256": art["sha256"]}})
    return subjects


def lock_file(root: Path) -> Path | None:
    """The lock beside the manifest: uv.lock, else requirements.lock / requirements.txt."""
    return next((root / name for name in _LOCKS if (root / name).is_file()), None)


def provenance_statement(
    staged: Mapping[str, Any],
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
    build = staged.get("build") or {}
    revision = build.get("revision") or staged.get("revision")
    dirty = bool(build.get("dirty", False))
    lock = lock if lock is not None else lock_file(manifest_path.parent)
    dependencies: list[dict[str, Any]] = [
        {"name": manifest_path.name, "digest": _digest(manifest_path.read_bytes())}
    ]
    if lock is not None:
        dependencies.append({"name": lock.name, "digest": _digest(lock.read_bytes())})
    if revision:
        dependencies.append(
            {
                "name": "source",
                "digest": {"gitCommit": revision},
                "annotations": {"dirty": dirty},
            }
        )
    metadata: dict[str, Any] = {"invocationId": f"{staged.get('project')}@{staged.get('version')}"}
    if build.get("created"):
        metadata["startedOn"] = build["created"]
    if finished:
        metadata["finishedOn"] = finished
    return {
        "_type": STATEMENT_TYPE,
        "subject": expected_subjects(staged),
        "predicateType": SLSA_PREDICATE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "project": staged.get("project"),
                    "version": staged.get("version"),
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


def _subject_set(subjects: object) -> set[tuple[str, str, str]]:
    found: set[tuple[str, str, str]] = set()
    for subject in subjects if isinstance(subjects, list) else []:
        digests = subject.get("digest") if isinstance(subject, dict) else None
        for algorithm, value in (digests or {}).items():
            found.add((str(subject.get("name")), str(algorithm), str(value)))
    return found


def _names_digest(statement: Mapping[str, Any], digest: str) -> bool:
    algorithm, _, hexpart = digest.partition(":")
    return any(
        a == algorithm and v == hexpart for _, a, v in _subject_set(statement.get("subject"))
    )


def verify_image_attestation(
    registry: Registry, repo: str, digest: str, public: ec.EllipticCurvePublicKey
) -> dict[str, Any] | None:
    """Check the `.att` of the image `digest` in `repo`, if it has one; its Statement.

    None when there is no `.att`. Each DSSE layer must verify under `public` and
    its Statement must list `digest` among its subjects; else VerifyError.
    """
    tag = attached_tag(digest, "att")
    where = f"{registry.host}/{repo}:{tag}"
    try:
        if registry.manifest_exists(repo, tag) is None:
            return None
        data, _, _ = registry.get_manifest(repo, tag)
    except NotFound:
        return None
    layers = json.loads(data).get("layers") or []
    statement: dict[str, Any] | None = None
    for desc in layers:
        if desc.get("mediaType") != DSSE_MEDIA_TYPE:
            continue
        blob = fetch_blob(registry, repo, str(desc.get("digest")))
        try:
            envelope = json.loads(blob)
        except ValueError:
            raise VerifyError(f"{where}: layer {desc.get('digest')} is not JSON") from None
        statement = verify_envelope(envelope, public, f"{where} layer {desc.get('digest')}")
        if not _names_digest(statement, digest):
            raise VerifyError(f"{where}: the attestation's subjects do not name {digest}")
    if statement is None:
        raise VerifyError(f"{where} holds no DSSE envelope")
    return statement


def _check_sums(folder: Path) -> int:
    """Every file SHA256SUMS lists has its sha256; every file is listed. How many."""
    listed: dict[str, str] = {}
    for number, line in enumerate((folder / SUMS).read_text().splitlines(), 1):
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64:
            raise VerifyError(f"{folder / SUMS}:{number}: not a sha256sum line")
        listed[rel] = digest
    for rel, digest in sorted(listed.items()):
        path = folder / rel
        if ".." in Path(rel).parts or not path.is_file():
            raise VerifyError(f"{path} is listed in {SUMS} but missing")
        found = sha256_file(path)
        if found != digest:
            raise VerifyError(f"{path} has sha256 {found}, {SUMS} says {digest}")
    unsummed = {SUMS, SUMS_SIG, _JOURNAL}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel not in listed and rel not in unsummed:
            raise VerifyError(f"{path} is in the release but not in {SUMS}")
    return len(listed)


def _check_release_json(folder: Path, staged: Mapping[str, Any]) -> None:
    """release.json's file digests and image index digests match the folder, and each
    SBOM describes an artifact the release lists (`of`: a path, or an image's or
    platform manifest's digest)."""
    artifacts = staged.get("artifacts", [])
    described = {str(a.get("path")) for a in artifacts} | {
        str(d)
        for a in artifacts
        if a.get("kind") == "image"
        for d in (a.get("digest"), *(m.get("digest") for m in a.get("manifests") or []))
    }
    for art in artifacts:
        of = art.get("of")
        if art.get("kind") == "sbom" and of is not None and str(of) not in described:
            raise VerifyError(
                f"{folder / str(art.get('path'))} describes {of}, which release.json does not list"
            )
    for art in artifacts:
        path = folder / str(art.get("path"))
        if art.get("kind") == "image":
            try:
                tops = json.loads((path / "index.json").read_bytes()).get("manifests") or []
            except (OSError, ValueError):
                raise VerifyError(f"{path}/index.json is missing or not JSON") from None
            found = [t.get("digest") for t in tops]
            if found != [art.get("digest")]:
                raise VerifyError(
                    f"{path}/index.json names {', '.join(map(str, found)) or 'nothing'}, "
                    f"release.json says {art.get('digest')}"
                )
        elif "sha256" in art:
            found_sha = sha256_file(path) if path.is_file() else "(missing)"
            if found_sha != art["sha256"]:
                raise VerifyError(
                    f"{path} has sha256 {found_sha}, release.json says {art['sha256']}"
                )


def verify_release(folder: Path, public: ec.EllipticCurvePublicKey) -> Sequence[str]:
    """Check a staged release folder; what was checked, one line each.

    In order: SHA256SUMS.sig over SHA256SUMS; every file against SHA256SUMS (and
    none unlisted); release.json's digests against the files; the provenance
    envelope's signature, and its subjects equal to release.json's artifacts and
    image digests. VerifyError names the first mismatch.
    """
    done: list[str] = []
    verify_sums(folder, public)
    done.append(f"{SUMS_SIG}: signature over {SUMS} verified")
    done.append(f"{SUMS}: {_check_sums(folder)} file(s) match")
    try:
        staged = json.loads((folder / RELEASE_JSON).read_bytes())
    except (OSError, ValueError):
        raise VerifyError(f"{folder / RELEASE_JSON} is missing or not JSON") from None
    _check_release_json(folder, staged)
    done.append(f"{RELEASE_JSON}: {len(staged.get('artifacts', []))} artifact(s) match")
    path = folder / PROVENANCE_FILE
    if not path.is_file():
        raise VerifyError(f"{path} is missing: the release has no provenance")
    lines = read_provenance(folder)
    if not lines:
        raise VerifyError(f"{path} is empty")
    want = _subject_set(expected_subjects(staged))
    for number, line in enumerate(lines, 1):
        where = f"{path}:{number}"
        try:
            envelope = json.loads(line)
        except ValueError:
            raise VerifyError(f"{where}: not JSON") from None
        statement = verify_envelope(envelope, public, where)
        if statement.get("predicateType") != SLSA_PREDICATE:
            raise VerifyError(f"{where}: predicateType is not {SLSA_PREDICATE}")
        have = _subject_set(statement.get("subject"))
        if have != want:
            extra, missing = sorted(have - want), sorted(want - have)
            first = (
                f"names {extra[0][0]} ({extra[0][1]}:{extra[0][2]}), which release.json does not"
                if extra
                else f"lacks {missing[0][0]} ({missing[0][1]}:{missing[0][2]})"
            )
            raise VerifyError(f"{where}: the provenance's subjects differ: it {first}")
        done.append(f"{PROVENANCE_FILE}: signature verified, {len(have)} subject(s) match")
    return done
