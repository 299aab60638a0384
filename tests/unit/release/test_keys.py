"""Signing keys and signed blobs (release/keys.py): keygen, where a key comes from, bad
keys named without their bytes, DER ECDSA signatures, SHA256SUMS.sig.

The image half (`.sig`/`.att` pushed to a registry, checked by openssl and a DSSE
library) runs against the real registry in tests/integration/test_signing.py. Here
a DSSE library from the index (securesystemslib) checks the envelopes too.
"""

from __future__ import annotations

import base64
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from shipyard.errors import UsageError
from shipyard.release.keys import (
    KEY_ENV,
    PASSWORD_ENV,
    SigningKey,
    VerifyError,
    generate_keypair,
    load_public_key,
    load_signing_key,
    sign_blob,
    sign_sums,
    verify_blob,
    verify_sums,
)
from shipyard.release.staged import SUMS_SIG


def _pem_body(path: Path) -> list[str]:
    """The base64 lines of a PEM file: what a leak of the key would contain."""
    return [line for line in path.read_text().splitlines() if not line.startswith("-----")]


def _pem(key: Any, password: bytes | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    data: bytes = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )
    return data


def test_keygen_writes_a_p256_pair_private_0600_and_refuses_to_overwrite(
    pair: tuple[SigningKey, Path, Path],
) -> None:
    key, private, public = pair
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert private.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert public.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    loaded = load_signing_key(private, environ={})
    assert loaded is not None and isinstance(loaded.private.curve, ec.SECP256R1)
    assert load_public_key(public).public_numbers() == key.public.public_numbers()
    before = private.read_bytes()
    with pytest.raises(UsageError, match="already exists"):
        generate_keypair(private, private.with_suffix(".other"))
    with pytest.raises(UsageError, match="already exists"):
        generate_keypair(private.with_name("new.key"), public)
    assert private.read_bytes() == before
    assert not private.with_name("new.key").exists()


def test_the_key_comes_from_the_flag_then_the_variable_as_a_path_or_pem(
    pair: tuple[SigningKey, Path, Path], tmp_path: Path
) -> None:
    key, private, _ = pair
    numbers = key.private.private_numbers().private_value
    assert load_signing_key(None, environ={}) is None
    assert load_signing_key(None, environ={KEY_ENV: "  "}) is None
    by_path = load_signing_key(None, environ={KEY_ENV: str(private)})
    by_pem = load_signing_key(None, environ={KEY_ENV: private.read_text()})
    assert by_path is not None and by_pem is not None
    assert by_path.private.private_numbers().private_value == numbers
    assert by_pem.private.private_numbers().private_value == numbers
    assert by_pem.source == f"${KEY_ENV} (PEM text)"
    # The flag wins over the variable.
    other = generate_keypair(tmp_path / "o.key", tmp_path / "o.pub")
    flagged = load_signing_key(tmp_path / "o.key", environ={KEY_ENV: str(private)})
    assert flagged is not None
    assert flagged.private.private_numbers() == other.private.private_numbers()
    assert "PRIVATE" not in repr(flagged) and str(numbers) not in repr(flagged)


@pytest.mark.parametrize(
    ("content", "password", "message"),
    [
        (None, None, "no such file.*shipyard keygen"),
        (b"not a key at all\n", None, "not a PEM private key"),
        ("rsa", None, "not ECDSA P-256"),
        ("p384", None, "not ECDSA P-256"),
        ("encrypted", None, f"encrypted; set {PASSWORD_ENV}"),
        ("encrypted", "wrong", "password in SHIPYARD_SIGNING_KEY_PASSWORD is wrong"),
        ("plain", "extra", f"not encrypted, but {PASSWORD_ENV} is set"),
        (b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nx\n", None, "cosign's own"),
    ],
)
def test_a_bad_key_is_a_usage_error_naming_the_path_and_the_fix_without_its_bytes(
    tmp_path: Path, content: bytes | str | None, password: str | None, message: str
) -> None:
    path = tmp_path / "bad.key"
    keys: dict[str, Any] = {
        "rsa": rsa.generate_private_key(65537, 2048),
        "p384": ec.generate_private_key(ec.SECP384R1()),
        "encrypted": ec.generate_private_key(ec.SECP256R1()),
        "plain": ec.generate_private_key(ec.SECP256R1()),
    }
    if isinstance(content, str):
        path.write_bytes(_pem(keys[content], b"right" if content == "encrypted" else None))
    elif content is not None:
        path.write_bytes(content)
    env = {PASSWORD_ENV: password} if password else {}
    calls: tuple[tuple[str, Callable[[], SigningKey | None]], ...] = (
        (f"--signing-key {path}", lambda: load_signing_key(path, environ=env)),
        (
            f"${KEY_ENV}='{path}'",
            lambda: load_signing_key(None, environ={**env, KEY_ENV: str(path)}),
        ),
    )
    for named, call in calls:
        expected, pattern = named, message
        if content is None and named.startswith("$"):  # a value that is no file: not shown
            expected, pattern = f"${KEY_ENV} names no file (its value is not shown)", "keygen"
        with pytest.raises(UsageError, match=pattern) as caught:
            call()
        text = str(caught.value)
        assert text.startswith(expected), text
        assert caught.value.exit_code == 2
        if path.exists():
            for line in _pem_body(path):
                assert line not in text


def test_a_bad_pem_in_the_variable_is_named_by_the_variable_never_quoted(tmp_path: Path) -> None:
    rsa_pem = _pem(rsa.generate_private_key(65537, 2048)).decode()
    with pytest.raises(UsageError) as caught:
        load_signing_key(None, environ={KEY_ENV: rsa_pem})
    assert str(caught.value).startswith(f"${KEY_ENV} (PEM text): the key is not ECDSA P-256")
    assert all(line not in str(caught.value) for line in rsa_pem.splitlines()[1:-1])
    # Something that is neither a path nor a PEM (a key pasted without its header) is
    # not echoed either.
    body = "".join(rsa_pem.splitlines()[1:4])
    with pytest.raises(UsageError) as caught:
        load_signing_key(None, environ={KEY_ENV: body + "\n" + body})
    assert body not in str(caught.value) and "names no file" in str(caught.value)
    with pytest.raises(UsageError) as caught:
        load_signing_key(None, environ={KEY_ENV: body})  # one line: could be a path
    assert body not in str(caught.value) and "names no file" in str(caught.value)
    with pytest.raises(UsageError, match="names no file"):
        load_signing_key(None, environ={KEY_ENV: "x" * 5000})  # too long for a path
    with pytest.raises(UsageError) as caught:  # the PEM given to --signing-key
        load_signing_key(rsa_pem, environ={})
    assert str(caught.value).startswith("--signing-key (a value that is no path)")
    assert all(line not in str(caught.value) for line in rsa_pem.splitlines()[1:-1])


def test_a_public_key_file_is_checked(pair: tuple[SigningKey, Path, Path], tmp_path: Path) -> None:
    _, private, _ = pair
    with pytest.raises(UsageError, match="this is a private key"):
        load_public_key(private)
    with pytest.raises(UsageError, match="cannot read"):
        load_public_key(tmp_path / "missing.pub")
    (tmp_path / "junk.pub").write_text("junk")
    with pytest.raises(UsageError, match="not a PEM public key"):
        load_public_key(tmp_path / "junk.pub")


def test_sign_blob_is_der_ecdsa_sha256_that_cryptography_verifies(
    pair: tuple[SigningKey, Path, Path],
) -> None:
    key, _, public_path = pair
    signature = sign_blob(key, b"payload")
    assert signature[0] == 0x30  # a DER SEQUENCE (r, s)
    public = serialization.load_pem_public_key(public_path.read_bytes())
    assert isinstance(public, ec.EllipticCurvePublicKey)
    public.verify(signature, b"payload", ec.ECDSA(hashes.SHA256()))
    assert verify_blob(public, b"payload", signature)
    assert not verify_blob(public, b"payloaD", signature)
    assert sign_blob(key, b"payload") == signature  # RFC 6979: the same bytes sign the same


def test_sums_signature_is_base64_der_over_the_exact_file(
    pair: tuple[SigningKey, Path, Path], tmp_path: Path
) -> None:
    key, _, public_path = pair
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "SHA256SUMS").write_text("0" * 64 + "  a\n")
    written = sign_sums(folder, key)
    assert written == folder / SUMS_SIG
    der = base64.b64decode(written.read_bytes(), validate=True)
    assert verify_blob(load_public_key(public_path), (folder / "SHA256SUMS").read_bytes(), der)
    verify_sums(folder, load_public_key(public_path))
    written.write_text("not base64 !")
    with pytest.raises(VerifyError, match="not base64"):
        verify_sums(folder, load_public_key(public_path))
    written.unlink()
    with pytest.raises(VerifyError, match="not signed"):
        verify_sums(folder, load_public_key(public_path))
