"""Signing keys, signed blobs, cosign payloads, DSSE and provenance, and `shipyard verify`
on a release folder.

The image half (`.sig`/`.att` pushed to a registry, checked by openssl and a DSSE
library) runs against the real registry in tests/integration/test_signing.py. Here
a DSSE library from the index (securesystemslib) checks the envelopes too.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer._key import SSlibKey

from shipyard.cli import main
from shipyard.release.keys import (
    SigningKey,
    VerifyError,
    load_public_key,
    load_signing_key,
    sign_sums,
)
from shipyard.release.provenance import (
    BUILD_TYPE,
    PROVENANCE_FILE,
    SLSA_PREDICATE,
    dsse_pae,
    expected_subjects,
    provenance_statement,
    sign_envelope,
    verify_envelope,
    write_provenance,
)
from shipyard.release.signing import _payload_problem, attached_tag, simple_signing_payload
from shipyard.release.staged import SUMS_SIG, parse_release
from shipyard.release.staging import sha256sums
from shipyard.release.verification import verify_release
from tests.unit.release.test_keys import _pem_body

DIGEST = "sha256:" + "ab" * 32


def _sslib_key(public_path: Path) -> SSlibKey:
    """The public key as securesystemslib's DSSE code takes it (cosign's empty keyid)."""
    # from_crypto would give it securesystemslib's own keyid; the envelope's is "".
    pem = public_path.read_text()
    return SSlibKey("", "ecdsa", "ecdsa-sha2-nistp256", {"public": pem})


# -- blobs, payloads, PAE ---------------------------------------------------------------------


def test_simple_signing_payload_is_cosigns_compact_json() -> None:
    payload = simple_signing_payload("127.0.0.1:5000/mesh/meshctl", DIGEST)
    assert payload == (
        b'{"critical":{"identity":{"docker-reference":"127.0.0.1:5000/mesh/meshctl"},'
        b'"image":{"docker-manifest-digest":"' + DIGEST.encode() + b'"},'
        b'"type":"cosign container image signature"},"optional":null}'
    )
    assert attached_tag(DIGEST, "sig") == "sha256-" + "ab" * 32 + ".sig"
    assert _payload_problem(payload, "127.0.0.1:5000/mesh/meshctl", DIGEST) is None
    other = "sha256:" + "cd" * 32
    assert "names " + DIGEST in str(_payload_problem(payload, "127.0.0.1:5000/mesh/meshctl", other))
    assert "repository" in str(_payload_problem(payload, "127.0.0.1:5000/mesh/other", DIGEST))
    assert "not a cosign" in str(_payload_problem(b"{}", "x", DIGEST))


def test_dsse_pae_matches_the_spec_vector() -> None:
    # The example of the DSSE protocol document.
    assert (
        dsse_pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_envelopes_verify_with_a_dsse_library_and_fail_when_tampered(
    pair: tuple[SigningKey, Path, Path],
) -> None:
    key, _, public_path = pair
    statement = {"_type": "https://in-toto.io/Statement/v1", "subject": []}
    envelope = sign_envelope(json.dumps(statement).encode(), key)
    sslib_key = _sslib_key(public_path)
    Envelope.from_dict(json.loads(json.dumps(envelope))).verify([sslib_key], 1)
    public = load_public_key(public_path)
    assert verify_envelope(envelope, public, "here") == statement
    tampered = {**envelope, "payload": base64.b64encode(b'{"_type":"x"}').decode()}
    with pytest.raises(VerifyError, match="here: the envelope's signature does not verify"):
        verify_envelope(tampered, public, "here")
    with pytest.raises(VerificationError, match="Found: 0"):
        Envelope.from_dict(json.loads(json.dumps(tampered))).verify([sslib_key], 1)
    retyped = {**envelope, "payloadType": "text/plain"}
    with pytest.raises(VerifyError, match="payloadType"):
        verify_envelope(retyped, public, "here")


# -- a staged release folder -----------------------------------------------------------------


def _release(folder: Path, key: SigningKey) -> dict[str, Any]:
    """A small staged release, as staging writes it, signed and with provenance."""
    folder.mkdir(parents=True)
    (folder / "wheels").mkdir()
    (folder / "wheels" / "hello-1.0-py3-none-any.whl").write_bytes(b"wheel bytes")
    (folder / "zipapps").mkdir()
    (folder / "zipapps" / "hello.pyz").write_bytes(b"#!zipapp")
    layout = folder / "images" / "hello"
    (layout / "blobs" / "sha256").mkdir(parents=True)
    index = b'{"schemaVersion":2,"manifests":[]}'
    digest = "sha256:" + hashlib.sha256(index).hexdigest()
    (layout / "blobs" / "sha256" / digest[7:]).write_bytes(index)
    (layout / "index.json").write_text(
        json.dumps({"schemaVersion": 2, "manifests": [{"digest": digest, "size": len(index)}]})
    )
    artifacts: list[dict[str, Any]] = []
    (folder / "sbom").mkdir()
    (folder / "sbom" / "hello.cdx.json").write_bytes(b'{"bomFormat": "CycloneDX"}')
    for kind, rel in (
        ("wheel", "wheels/hello-1.0-py3-none-any.whl"),
        ("zipapp", "zipapps/hello.pyz"),
    ):
        data = (folder / rel).read_bytes()
        artifacts.append(
            {
                "kind": kind,
                "path": rel,
                "sha256": hashlib.sha256(data).hexdigest(),
                "size": len(data),
            }
        )
    artifacts.append(
        {
            "kind": "image",
            "binary": "hello",
            "path": "images/hello",
            "digest": digest,
            "hubs": ["127.0.0.1:5000/mesh"],
            "tags": ["1.0", "latest"],
        }
    )
    sbom = (folder / "sbom" / "hello.cdx.json").read_bytes()
    artifacts.append(  # the SBOM of the zipapp
        {
            "kind": "sbom",
            "path": "sbom/hello.cdx.json",
            "sha256": hashlib.sha256(sbom).hexdigest(),
            "size": len(sbom),
            "of": "zipapps/hello.pyz",
        }
    )
    staged = {
        "schema": 1,
        "project": "hello",
        "version": "1.0",
        "revision": "c0ffee" * 6 + "c0ff",
        "build": {
            "version": "1.0",
            "revision": "c0ffee" * 6 + "c0ff",
            "dirty": True,
            "created": "2026-12-04T00:00:00Z",
        },
        "artifacts": artifacts,
    }
    (folder / "release.json").write_text(json.dumps(staged, indent=2))
    root = folder.parent / "repo"
    root.mkdir(exist_ok=True)
    (root / "binaries.yaml").write_text("schema: 1\n")
    (root / "uv.lock").write_text("version = 1\n")
    statement = provenance_statement(
        parse_release(staged),
        manifest_path=root / "binaries.yaml",
        parameters={"selection": {"binaries": ["hello"]}, "flags": {"snapshot": False}},
    )
    write_provenance(folder, statement, key)
    (folder / "SHA256SUMS").write_text(sha256sums(folder))
    sign_sums(folder, key)
    return staged


def test_the_provenance_statement_is_slsa_v1_with_every_subject(
    pair: tuple[SigningKey, Path, Path], tmp_path: Path
) -> None:
    key, _, public_path = pair
    folder = tmp_path / "release" / "1.0"
    staged = _release(folder, key)
    line = (folder / PROVENANCE_FILE).read_bytes()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    envelope = json.loads(line)
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    Envelope.from_dict(envelope).verify([_sslib_key(public_path)], 1)
    statement = json.loads(base64.b64decode(json.loads(line)["payload"]))
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == SLSA_PREDICATE
    names = {s["name"]: s["digest"] for s in statement["subject"]}
    wheel = staged["artifacts"][0]
    assert names["wheels/hello-1.0-py3-none-any.whl"] == {"sha256": wheel["sha256"]}
    image_hex = staged["artifacts"][2]["digest"].partition(":")[2]
    assert names["127.0.0.1:5000/mesh/hello:1.0"] == {"sha256": image_hex}
    assert len(names) == 4 and statement["subject"] == [
        s.to_json() for s in expected_subjects(parse_release(staged))
    ]
    build = statement["predicate"]["buildDefinition"]
    assert build["buildType"] == BUILD_TYPE
    assert build["externalParameters"]["version"] == "1.0"
    assert build["externalParameters"]["selection"] == {"binaries": ["hello"]}
    repo = tmp_path / "release" / "repo"
    deps = {d["name"]: d for d in build["resolvedDependencies"]}
    manifest_sha = hashlib.sha256((repo / "binaries.yaml").read_bytes()).hexdigest()
    assert deps["binaries.yaml"]["digest"] == {"sha256": manifest_sha}
    assert deps["uv.lock"]["digest"] == {"sha256": hashlib.sha256(b"version = 1\n").hexdigest()}
    assert deps["source"] == {
        "name": "source",
        "digest": {"gitCommit": staged["revision"]},
        "annotations": {"dirty": True},
    }
    internal = build["internalParameters"]
    assert internal["manifestDigest"] == {"sha256": manifest_sha}
    assert internal["dirty"] is True and internal["shipyardVersion"]
    assert statement["predicate"]["runDetails"]["builder"]["id"]


def test_verify_accepts_the_release_then_names_each_tampering(
    pair: tuple[SigningKey, Path, Path], tmp_path: Path
) -> None:
    key, _, public_path = pair
    public = load_public_key(public_path)
    folder = tmp_path / "release" / "1.0"
    _release(folder, key)
    done = verify_release(folder, public)
    assert any("SHA256SUMS.sig" in line for line in done)
    assert any("4 subject(s) match" in line for line in done)
    # A file changed after staging.
    wheel = folder / "wheels" / "hello-1.0-py3-none-any.whl"
    wheel.write_bytes(b"other bytes")
    with pytest.raises(
        VerifyError, match=r"hello-1.0-py3-none-any.whl has sha256 .*SHA256SUMS says"
    ):
        verify_release(folder, public)
    wheel.write_bytes(b"wheel bytes")
    # SHA256SUMS rewritten to match the change: its signature no longer does.
    sums = folder / "SHA256SUMS"
    original = sums.read_bytes()
    sums.write_bytes(original.replace(b"hello.pyz", b"hello.pyz "))
    with pytest.raises(VerifyError, match=r"SHA256SUMS.sig does not verify"):
        verify_release(folder, public)
    sums.write_bytes(original)
    # A file nobody staged.
    (folder / "extra.txt").write_text("x")
    with pytest.raises(VerifyError, match=r"extra.txt is in the release but not in SHA256SUMS"):
        verify_release(folder, public)
    (folder / "extra.txt").unlink()
    verify_release(folder, public)
    # Another key.
    stranger = ec.generate_private_key(ec.SECP256R1()).public_key()
    with pytest.raises(VerifyError, match="does not verify"):
        verify_release(folder, stranger)


def test_verify_fails_on_a_tampered_provenance_payload_or_other_subjects(
    pair: tuple[SigningKey, Path, Path], tmp_path: Path
) -> None:
    key, _, public_path = pair
    public = load_public_key(public_path)
    folder = tmp_path / "release" / "1.0"
    staged = _release(folder, key)
    line = json.loads((folder / PROVENANCE_FILE).read_bytes())
    statement = json.loads(base64.b64decode(line["payload"]))

    def restage(envelope: dict[str, Any]) -> None:
        (folder / PROVENANCE_FILE).write_text(json.dumps(envelope) + "\n")
        (folder / SUMS_SIG).unlink()
        (folder / "SHA256SUMS").write_text(sha256sums(folder))
        sign_sums(folder, key)

    # The payload edited (a subject's digest), its signature kept.
    statement["subject"][0]["digest"]["sha256"] = "0" * 64
    edited = json.dumps(statement).encode()
    restage({**line, "payload": base64.b64encode(edited).decode()})
    with pytest.raises(VerifyError, match="envelope's signature does not verify"):
        verify_release(folder, public)
    # Signed properly, but naming a digest release.json does not have.
    restage(sign_envelope(edited, key))
    with pytest.raises(VerifyError, match="subjects differ: it names wheels/hello"):
        verify_release(folder, public)
    # An image digest missing from the provenance.
    statement["subject"] = [s.to_json() for s in expected_subjects(parse_release(staged))][:2]
    restage(sign_envelope(json.dumps(statement).encode(), key))
    with pytest.raises(VerifyError, match=r"lacks 127.0.0.1:5000/mesh/hello:1.0"):
        verify_release(folder, public)
    (folder / PROVENANCE_FILE).unlink()
    (folder / SUMS_SIG).unlink()
    (folder / "SHA256SUMS").write_text(sha256sums(folder))
    sign_sums(folder, key)
    with pytest.raises(VerifyError, match="a signed release has provenance"):
        verify_release(folder, public)


# -- the CLI ---------------------------------------------------------------------------------


def test_cli_keygen_and_verify_exit_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = tmp_path / "k" / "release"
    (tmp_path / "k").mkdir()
    assert main(["keygen", "--out", str(prefix)]) == 0
    out = capsys.readouterr().out
    assert f"{prefix}.key" in out and f"{prefix}.pub" in out
    key_text = Path(f"{prefix}.key").read_text()
    assert all(line not in out for line in _pem_body(Path(f"{prefix}.key")))
    assert main(["keygen", "--out", str(prefix)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert Path(f"{prefix}.key").read_text() == key_text
    key = load_signing_key(Path(f"{prefix}.key"), environ={})
    assert key is not None
    folder = tmp_path / "release" / "1.0"
    _release(folder, key)
    assert main(["verify", str(folder), "--key", f"{prefix}.pub"]) == 0
    assert f"verified {folder}" in capsys.readouterr().out
    (folder / "zipapps" / "hello.pyz").write_bytes(b"changed")
    assert main(["verify", str(folder), "--key", f"{prefix}.pub"]) == 1
    err = capsys.readouterr().err
    assert "hello.pyz has sha256" in err
    assert main(["verify", str(folder)]) == 2
    assert "needs --key" in capsys.readouterr().err
    assert main(["verify", str(folder), "--key", f"{prefix}.key"]) == 2
    assert "this is a private key" in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "nowhere"), "--key", f"{prefix}.pub"]) == 2
    assert "not a release folder" in capsys.readouterr().err
    assert main(["verify", "127.0.0.1:5000/UPPER:tag", "--key", f"{prefix}.pub"]) == 2
    with pytest.raises(SystemExit) as exited:
        main(["verify", "--key", f"{prefix}.pub", "--bogus", str(folder)])
    assert exited.value.code == 2
    assert os.path.exists(f"{prefix}.pub")


def test_verify_names_an_sbom_that_describes_what_the_release_does_not_list(
    pair: tuple[SigningKey, Path, Path], tmp_path: Path
) -> None:
    key, _, public_path = pair
    folder = tmp_path / "release"
    staged = _release(folder, key)
    public = load_public_key(public_path)
    verify_release(folder, public)  # as staged: the SBOM is of the listed zipapp
    # A release signed as it is, whose SBOM names another artifact: the SBOM check
    # (not the sums, which hold) fails it.
    sbom = next(a for a in staged["artifacts"] if a["kind"] == "sbom")
    sbom["of"] = "zipapps/other.pyz"
    (folder / "release.json").write_text(json.dumps(staged, indent=2))
    statement = provenance_statement(
        parse_release(staged),
        manifest_path=tmp_path / "repo" / "binaries.yaml",
        parameters={"selection": {"binaries": ["hello"]}, "flags": {"snapshot": False}},
    )
    write_provenance(folder, statement, key)
    (folder / "SHA256SUMS").write_text(sha256sums(folder))
    sign_sums(folder, key)
    with pytest.raises(VerifyError, match=r"describes zipapps/other\.pyz, which release\.json"):
        verify_release(folder, public)
