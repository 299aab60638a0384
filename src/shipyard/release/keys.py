"""The signing key and what it signs as a blob: cosign's key format and `SHA256SUMS.sig`.

A key is a PEM ECDSA P-256 private key (PKCS#8 or SEC1, as `shipyard keygen` and
`openssl` write them), from `--signing-key PATH` or `$SHIPYARD_SIGNING_KEY`. The
variable holds a path, or the PEM text itself (a CI secret): a value that starts
with `-----BEGIN` is read as the key. An encrypted key's password comes from
`$SHIPYARD_SIGNING_KEY_PASSWORD`. Messages name where a key came from, never what
it holds.

A blob (`SHA256SUMS`) is signed as `cosign sign-blob` signs it: the DER
ECDSA-SHA256 signature, base64 in `SHA256SUMS.sig`; `openssl dgst -sha256 -verify
cosign.pub -signature <(base64 -d SHA256SUMS.sig) SHA256SUMS` checks it. Images are
signed in `signing`.

Signatures are deterministic (RFC 6979) where the OpenSSL underneath can, so signing
the same bytes again gives the same signature.
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from shipyard._environ import SIGNING_KEY, SIGNING_KEY_PASSWORD
from shipyard._fs import atomic_write
from shipyard.errors import ShipyardError, UsageError
from shipyard.release.staged import SUMS, SUMS_SIG

__all__ = [
    "KEY_ENV",
    "PASSWORD_ENV",
    "SIG_LIMIT",
    "SUMS_LIMIT",
    "SigningKey",
    "VerifyError",
    "generate_keypair",
    "load_public_key",
    "load_signing_key",
    "parse_signing_key",
    "read_capped",
    "sign_blob",
    "sign_sums",
    "verify_blob",
    "verify_sums",
]

KEY_ENV = SIGNING_KEY.name
PASSWORD_ENV = SIGNING_KEY_PASSWORD.name
_PEM_START = "-----BEGIN"
_KEYGEN_HINT = "write a pair with `shipyard keygen`"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # opening a FIFO must not wait for a writer
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
