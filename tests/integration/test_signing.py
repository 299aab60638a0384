"""Signatures and provenance against the real local registry, checked by code shipyard
does not contain: `openssl dgst -verify` for every ECDSA signature (over the exact
payload bytes the registry serves) and securesystemslib's DSSE for the provenance.

An image is pushed, signed (`sha256-<hex>.sig`) and attested (`sha256-<hex>.att`);
a real snapshot release folder is signed (SHA256SUMS.sig, provenance.intoto.jsonl);
`shipyard verify` accepts both, and exits 1 naming the mismatch for a tampered
payload, a payload naming another digest, another key, a tampered file or
SHA256SUMS. The private key appears in nothing written: the release folder, the
registry's blobs and manifests, and what the commands printed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer._key import SSlibKey

from shipyard.oci.remote.push import push_layout, read_layout_image
from shipyard.oci.remote.registry import Registry
from shipyard.release.keys import SigningKey, generate_keypair, sign_blob
from shipyard.release.provenance import (
    DSSE_MEDIA_TYPE,
    PROVENANCE_FILE,
    SLSA_PREDICATE,
    expected_subjects,
    provenance_statement,
    push_attestation,
    sign_envelope,
)
from shipyard.release.signing import (
    SIGNATURE_ANNOTATION,
    SIMPLE_SIGNING_MEDIA_TYPE,
    AttachedLayer,
    attached_tag,
    push_attached,
    push_signature,
    simple_signing_payload,
)
from shipyard.release.staged import SUMS_SIG, parse_release
from shipyard.release.staging import sha256sums
from tests.integration._release import make_repo
from tests.integration._secrets import Scanner
from tests.integration.conftest import Services
from tests.integration.test_push import make_layout

pytestmark = [pytest.mark.integration, pytest.mark.requires("registry")]

RUN = uuid.uuid4().hex[:8]
PLATFORMS = ("linux/amd64", "linux/arm64")
SNAPSHOT_MANIFEST = """\
schema: 1
project: {name: mesh, version: git, python: "3.11"}
defaults:
  outputs: [wheel, zipapp]
  platforms: [linux/amd64]
binaries:
  meshctl: {source: ctl, entrypoint: "meshctl.cli:main"}
"""


class Keys:
    """The signing pair of this module's tests, and every command's output (to scan)."""

    def __init__(self, folder: Path) -> None:
        self.private_path, self.public_path = folder / "cosign.key", folder / "cosign.pub"
        self.key: SigningKey = generate_keypair(self.private_path, self.public_path)
        self.outputs: list[tuple[str, str]] = []

    def leak_forms(self) -> dict[bytes, str]:
        """What a leak of the private key would contain: the PEM, each of its base64 lines,
        the DER, and the private scalar in hex and raw."""
        pem = self.private_path.read_bytes()
        der = self.key.private.private_bytes(
            serialization.Encoding.DER,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        scalar = self.key.private.private_numbers().private_value
        forms = {pem: "PEM", der: "DER", scalar.to_bytes(32, "big"): "scalar"}
        forms[f"{scalar:064x}".encode()] = "scalar hex"
        for number, line in enumerate(pem.splitlines()):
            if not line.startswith(b"-----"):
                forms[line] = f"PEM line {number}"
        return forms


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return Keys(tmp_path_factory.mktemp("keys"))


def _shipyard(keys: Keys, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "shipyard", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**os.environ, "SHIPYARD_SIGNING_KEY": str(keys.private_path)},
    )
    keys.outputs.append((f"shipyard {' '.join(args)}", done.stdout + done.stderr))
    return done


def _get(url: str) -> bytes:
    """GET from the loopback registry with the standard library (no proxy)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    accept = "application/vnd.oci.image.manifest.v1+json"
    with opener.open(urllib.request.Request(url, headers={"Accept": accept}), timeout=30) as resp:
        data: bytes = resp.read()
    return data


def _openssl_verify(public: Path, signature: bytes, data: bytes, folder: Path) -> str:
    """`openssl dgst -sha256 -verify PUB -signature SIG DATA`: its output; fails if not OK."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sig.der").write_bytes(signature)
    (folder / "data").write_bytes(data)
    done = subprocess.run(
        [
            "openssl",
            "dgst",
            "-sha256",
            "-verify",
            str(public),
            "-signature",
            str(folder / "sig.der"),
            str(folder / "data"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return (done.stdout + done.stderr).strip()


def _sslib_key(public: Path) -> SSlibKey:
    return SSlibKey("", "ecdsa", "ecdsa-sha2-nistp256", {"public": public.read_text()})


def _pushed_image(services: Services, folder: Path, name: str) -> tuple[Registry, str, str]:
    """A small two-platform image pushed to `<run>/<name>:1.0`: client, repository, digest."""
    registry = Registry(services.registry)
    repo = f"signing-{RUN}/{name}"
    digest = make_layout(folder, PLATFORMS, seed=f"{RUN}-{name}")
    push_layout(registry, repo, read_layout_image(folder), ["1.0"])
    return registry, repo, digest


def _attached(services: Services, repo: str, digest: str, suffix: str) -> dict[str, Any]:
    url = f"http://{services.registry}/v2/{repo}/manifests/{attached_tag(digest, suffix)}"
    manifest: dict[str, Any] = json.loads(_get(url))
    return manifest


def _blob(services: Services, repo: str, digest: str) -> bytes:
    data = _get(f"http://{services.registry}/v2/{repo}/blobs/{digest}")
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
    return data


def test_an_image_signature_verifies_with_openssl_over_the_registrys_bytes(
    services: Services, keys: Keys, tmp_path: Path
) -> None:
    registry, repo, digest = _pushed_image(services, tmp_path / "layout", "signed")
    pushed = push_signature(registry, repo, digest, keys.key)
    assert pushed.pushed and pushed.tag == "sha256-" + digest[7:] + ".sig"
    again = push_signature(registry, repo, digest, keys.key)
    assert not again.pushed and again.digest == pushed.digest, "a second signing pushes nothing"

    manifest = _attached(services, repo, digest, "sig")
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    config = json.loads(_blob(services, repo, manifest["config"]["digest"]))
    assert config["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == SIMPLE_SIGNING_MEDIA_TYPE
    payload = _blob(services, repo, layer["digest"])
    assert payload == simple_signing_payload(f"{services.registry}/{repo}", digest)
    assert json.loads(payload)["critical"]["image"]["docker-manifest-digest"] == digest
    signature = base64.b64decode(layer["annotations"][SIGNATURE_ANNOTATION], validate=True)
    verdict = _openssl_verify(keys.public_path, signature, payload, tmp_path / "openssl")
    assert verdict == "Verified OK"
    # openssl is a real check: a byte more and it refuses.
    refused = _openssl_verify(keys.public_path, signature, payload + b" ", tmp_path / "bad")
    assert "Verification failure" in refused

    for ref in (f"{services.registry}/{repo}:1.0", f"{services.registry}/{repo}@{digest}"):
        done = _shipyard(keys, "verify", ref, "--key", str(keys.public_path))
        assert done.returncode == 0, done.stderr
        assert f"verified {services.registry}/{repo}@{digest}" in done.stdout


def test_an_attestation_verifies_with_a_dsse_library_and_shipyard_verify(
    services: Services, keys: Keys, tmp_path: Path
) -> None:
    registry, repo, digest = _pushed_image(services, tmp_path / "layout", "attested")
    push_signature(registry, repo, digest, keys.key)
    staged = {
        "project": "mesh",
        "version": "1.0",
        "build": {"revision": "a" * 40, "dirty": False},
        "artifacts": [
            {
                "kind": "image",
                "binary": "attested",
                "path": "images/attested",
                "digest": digest,
                "hubs": [f"{services.registry}/signing-{RUN}"],
                "tags": ["1.0"],
            }
        ],
    }
    (tmp_path / "binaries.yaml").write_text("schema: 1\n")
    statement = provenance_statement(
        parse_release(staged), manifest_path=tmp_path / "binaries.yaml", parameters={"flags": {}}
    )
    envelope = json.dumps(
        sign_envelope(json.dumps(statement).encode(), keys.key), separators=(",", ":")
    ).encode()
    pushed = push_attestation(registry, repo, digest, envelope)
    assert pushed.pushed and pushed.tag.endswith(".att")
    assert not push_attestation(registry, repo, digest, envelope).pushed

    (layer,) = _attached(services, repo, digest, "att")["layers"]
    assert layer["mediaType"] == DSSE_MEDIA_TYPE
    assert layer["annotations"]["predicateType"] == SLSA_PREDICATE
    fetched = json.loads(_blob(services, repo, layer["digest"]))
    Envelope.from_dict(json.loads(json.dumps(fetched))).verify([_sslib_key(keys.public_path)], 1)
    inside = json.loads(base64.b64decode(fetched["payload"]))
    assert {
        "name": f"{services.registry}/signing-{RUN}/attested:1.0",
        "digest": {"sha256": digest[7:]},
    } in inside["subject"]
    done = _shipyard(
        keys, "verify", f"{services.registry}/{repo}:1.0", "--key", str(keys.public_path)
    )
    assert done.returncode == 0, done.stderr
    assert f"{attached_tag(digest, 'att')}: {SLSA_PREDICATE}" in done.stdout


def test_tampered_image_signatures_fail_shipyard_verify(
    services: Services, keys: Keys, tmp_path: Path
) -> None:
    pub = str(keys.public_path)
    registry, repo, digest = _pushed_image(services, tmp_path / "a", "tamper-payload")
    # A payload changed after signing, its signature kept.
    payload = simple_signing_payload(f"{services.registry}/{repo}", digest)
    signature = base64.b64encode(sign_blob(keys.key, payload)).decode()
    tampered = payload.replace(b'"optional":null', b'"optional":{"x":"y"}')
    layer = AttachedLayer(tampered, SIMPLE_SIGNING_MEDIA_TYPE, {SIGNATURE_ANNOTATION: signature})
    push_attached(registry, repo, digest, "sig", layer)
    done = _shipyard(keys, "verify", f"{services.registry}/{repo}:1.0", "--key", pub)
    assert done.returncode == 1, done.stderr
    assert "does not verify its payload with the given key" in done.stderr

    # A properly signed payload that names another image's digest.
    _, other_repo, other = _pushed_image(services, tmp_path / "b", "tamper-digest")
    moved = simple_signing_payload(f"{services.registry}/{other_repo}", digest)
    layer = AttachedLayer(
        moved,
        SIMPLE_SIGNING_MEDIA_TYPE,
        {SIGNATURE_ANNOTATION: base64.b64encode(sign_blob(keys.key, moved)).decode()},
    )
    push_attached(registry, other_repo, other, "sig", layer)
    done = _shipyard(keys, "verify", f"{services.registry}/{other_repo}:1.0", "--key", pub)
    assert done.returncode == 1, done.stderr
    assert f"the signed payload names {digest}, not the image's {other}" in done.stderr

    # Signed, but with another key; and an image not signed at all.
    _, signed_repo, signed = _pushed_image(services, tmp_path / "c", "other-key")
    push_signature(registry, signed_repo, signed, keys.key)
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    generate_keypair(stranger / "k.key", stranger / "k.pub")
    done = _shipyard(
        keys, "verify", f"{services.registry}/{signed_repo}:1.0", "--key", str(stranger / "k.pub")
    )
    assert done.returncode == 1 and "does not verify" in done.stderr, done.stderr
    _, bare_repo, _ = _pushed_image(services, tmp_path / "d", "unsigned")
    done = _shipyard(keys, "verify", f"{services.registry}/{bare_repo}:1.0", "--key", pub)
    assert done.returncode == 1 and "is not signed" in done.stderr, done.stderr

    # An attestation whose payload was changed after signing.
    statement = {"_type": "https://in-toto.io/Statement/v1", "subject": [], "predicate": {}}
    envelope = sign_envelope(json.dumps(statement).encode(), keys.key)
    envelope["payload"] = base64.b64encode(b'{"_type":"https://in-toto.io/Statement/v1"}').decode()
    push_attestation(registry, signed_repo, signed, json.dumps(envelope).encode())
    done = _shipyard(keys, "verify", f"{services.registry}/{signed_repo}:1.0", "--key", pub)
    assert done.returncode == 1, done.stderr
    assert "the envelope's signature does not verify" in done.stderr
    with pytest.raises(VerificationError):
        Envelope.from_dict(envelope).verify([_sslib_key(keys.public_path)], 1)
    # A tag that does not exist is a failed verification too (exit 1), named.
    done = _shipyard(keys, "verify", f"{services.registry}/{bare_repo}:nope", "--key", pub)
    assert done.returncode == 1 and "does not exist" in done.stderr, done.stderr


@pytest.fixture(scope="module")
def signed_release(
    keys: Keys, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, Path]]:
    """A real snapshot release (wheels, zipapp, archive, SBOM) signed by the pipeline
    (`--signing-key`): provenance written before SHA256SUMS, SHA256SUMS.sig after it."""
    repo = make_repo(tmp_path_factory.mktemp("signed") / "repo", SNAPSHOT_MANIFEST)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIPYARD_INDEX_")}
    env.update(CI="1", SHIPYARD_CACHE_DIR=str(repo.parent / "cache"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "shipyard",
            "release",
            "--snapshot",
            f"--signing-key={keys.private_path}",
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    keys.outputs.append(("shipyard release --snapshot", done.stdout + done.stderr))
    assert done.returncode == 0, done.stderr
    (folder,) = (repo / "dist" / "release").iterdir()
    assert "signing with the key from --signing-key" in done.stderr
    yield repo, folder


def test_a_signed_release_verifies_with_openssl_and_the_dsse_library(
    keys: Keys, signed_release: tuple[Path, Path], tmp_path: Path
) -> None:
    _, folder = signed_release
    signature = base64.b64decode((folder / SUMS_SIG).read_bytes(), validate=True)
    sums = (folder / "SHA256SUMS").read_bytes()
    assert _openssl_verify(keys.public_path, signature, sums, tmp_path / "o") == "Verified OK"
    checked = subprocess.run(
        ["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=folder, capture_output=True, check=False
    )
    assert checked.returncode == 0, checked.stdout
    (line,) = (folder / PROVENANCE_FILE).read_bytes().splitlines()
    envelope = Envelope.from_dict(json.loads(line))
    envelope.verify([_sslib_key(keys.public_path)], 1)
    statement = json.loads(envelope.payload)
    staged = json.loads((folder / "release.json").read_bytes())
    kinds = {a["kind"] for a in staged["artifacts"]}
    assert {"wheel", "zipapp", "sbom"} <= kinds
    assert statement["subject"] == [s.to_json() for s in expected_subjects(parse_release(staged))]
    assert len(statement["subject"]) == len(staged["artifacts"])
    done = _shipyard(keys, "verify", str(folder), "--key", str(keys.public_path))
    assert done.returncode == 0, done.stderr
    assert f"{len(staged['artifacts'])} subject(s) match" in done.stdout


def test_a_tampered_release_fails_shipyard_verify(
    keys: Keys, signed_release: tuple[Path, Path], tmp_path: Path
) -> None:
    _, folder = signed_release
    pub = str(keys.public_path)
    staged = json.loads((folder / "release.json").read_bytes())
    zipapp = folder / next(a["path"] for a in staged["artifacts"] if a["kind"] == "zipapp")
    original = zipapp.read_bytes()
    try:
        zipapp.write_bytes(original + b"\0")
        done = _shipyard(keys, "verify", str(folder), "--key", pub)
        assert done.returncode == 1 and f"{zipapp} has sha256" in done.stderr, done.stderr
        # SHA256SUMS made to agree with the change: its signature no longer does.
        sums = folder / "SHA256SUMS"
        before = sums.read_bytes()
        sums.write_text(sha256sums(folder))
        done = _shipyard(keys, "verify", str(folder), "--key", pub)
        assert done.returncode == 1 and "SHA256SUMS.sig does not verify" in done.stderr
        signature = base64.b64decode((folder / SUMS_SIG).read_bytes())
        refused = _openssl_verify(keys.public_path, signature, sums.read_bytes(), tmp_path / "o")
        assert "Verification failure" in refused
        sums.write_bytes(before)
    finally:
        zipapp.write_bytes(original)
    done = _shipyard(keys, "verify", str(folder), "--key", pub)
    assert done.returncode == 0, done.stderr


def test_no_private_key_material_in_anything_written(
    services: Services, keys: Keys, signed_release: tuple[Path, Path]
) -> None:
    """Runs last in this module: scans every output above, the signed release folder (and
    the archives in it), the repository's dist/, and every blob and manifest pushed."""
    repo, folder = signed_release
    scanner = Scanner(keys.leak_forms())
    assert scanner.tree(folder) > 5
    scanner.tree(repo / "dist")
    for where, text in keys.outputs:
        scanner.text(where, text)
    registry = Registry(services.registry)
    pushed = 0
    for name in ("signed", "attested", "tamper-payload", "other-key"):
        repo_name = f"signing-{RUN}/{name}"
        for tag in registry.tags(repo_name):
            data, _, _ = registry.get_manifest(repo_name, tag)
            scanner.data(f"{repo_name}:{tag}", data)
            for layer in json.loads(data).get("layers", []):
                scanner.data(
                    f"{repo_name}@{layer['digest']}", _blob(services, repo_name, layer["digest"])
                )
                pushed += 1
    assert pushed >= 6, "the signatures and attestations above were scanned"
    assert len(keys.outputs) >= 8
    # The scanner finds the key where it is: it is a real search.
    probe = Scanner(keys.leak_forms())
    probe.data("the key file itself", keys.private_path.read_bytes())
    assert probe.leaks
    assert scanner.leaks == []


IMAGES_MANIFEST = """\
schema: 1
project: {{name: mesh, version: git, python: "3.11"}}
defaults:
  outputs: [image]
  platforms: [linux/amd64, linux/arm64]
  image: {{hubs: ["{hub}"], tags: [latest]}}
binaries:
  meshctl: {{source: ctl, entrypoint: "meshctl.cli:main"}}
"""


def test_a_published_release_is_signed_and_attested_before_its_tags_move(
    keys: Keys, services: Services, tmp_path: Path
) -> None:
    """The pipeline with a key: staging signs SHA256SUMS and writes the provenance;
    publish attaches .sig and .att to each image on the hub (journalled: a second
    publish signs nothing again); verify checks the signature; `shipyard verify`
    accepts the image and the folder."""
    from shipyard.release import ReleaseOptions, prepare_release, release
    from shipyard.release.pipeline import PIPELINE, run_pipeline
    from shipyard.release.publish import Publish
    from tests.integration._release import BUILDERS

    prefix = f"signing-{RUN}-rel"
    repo = make_repo(tmp_path / "repo", IMAGES_MANIFEST.format(hub=f"{services.registry}/{prefix}"))
    env = {**os.environ, "SHIPYARD_SIGNING_KEY": str(keys.private_path)}
    lines: list[str] = []
    ctx = prepare_release(
        repo / "binaries.yaml",
        ReleaseOptions(version="1.0.0"),
        env=env,
        builders=BUILDERS,
        on_step=lines.append,
    )
    release(ctx)
    keys.outputs.append(("release 1.0.0", "\n".join(lines)))
    folder = ctx.release_dir
    assert (folder / SUMS_SIG).is_file() and (folder / PROVENANCE_FILE).is_file()
    (image,) = [
        a
        for a in json.loads((folder / "release.json").read_text())["artifacts"]
        if a["kind"] == "image"
    ]
    repo_name, digest = f"{prefix}/meshctl", image["digest"]
    signature = _attached(services, repo_name, digest, "sig")
    layer = signature["layers"][0]
    payload = _blob(services, repo_name, layer["digest"])
    sig = base64.b64decode(layer["annotations"]["dev.cosignproject.cosign/signature"])
    assert _openssl_verify(keys.public_path, sig, payload, tmp_path / "o") == "Verified OK"
    assert json.loads(payload)["critical"]["image"]["docker-manifest-digest"] == digest
    attestation = _attached(services, repo_name, digest, "att")
    envelope = _blob(services, repo_name, attestation["layers"][0]["digest"])
    assert envelope == (folder / PROVENANCE_FILE).read_bytes().strip()
    # Signed before any tag moved: the journal's order.
    signed = next(i for i, x in enumerate(lines) if x.startswith("pushed") and ".sig -> " in x)
    tagged = next(i for i, x in enumerate(lines) if x.startswith("tagged "))
    assert signed < tagged, lines
    # A second publish finds everything journalled: nothing is signed again.
    again: list[str] = []
    ctx.on_step = again.append
    run_pipeline(ctx, [s for s in PIPELINE if isinstance(s, Publish)])
    assert any(x.startswith("journalled sign ") for x in again), again
    assert any(x.startswith("journalled attest ") for x in again), again
    for target in (f"{services.registry}/{repo_name}:1.0.0", str(folder)):
        done = _shipyard(keys, "verify", target, "--key", str(keys.public_path))
        assert done.returncode == 0, (target, done.stderr)
