"""`shipyard keygen` and `shipyard verify`: a signing key pair, and checking what was signed.

Only argparse is imported until a command runs; neither reads the manifest.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from shipyard.errors import UsageError

__all__ = ["add_parsers", "run_keygen", "run_verify"]


def add_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Register `keygen` and `verify` on the CLI's subcommands.

    `common` (the manifest's -f) is taken for the registration's shape but not
    added: neither command reads the manifest.
    """
    del common
    keygen = sub.add_parser(
        "keygen",
        help="write an ECDSA P-256 signing key pair (PREFIX.key, PREFIX.pub)",
        description=(
            "Write a PEM ECDSA P-256 key pair as cosign uses: PREFIX.key (PKCS#8, mode "
            "0600; pass it as --signing-key or $SHIPYARD_SIGNING_KEY) and PREFIX.pub (give "
            "it to `shipyard verify --key`, `cosign verify --key` or openssl). Existing "
            "files are never overwritten."
        ),
    )
    keygen.add_argument(
        "--out", metavar="PREFIX", default="cosign", help="file prefix (default: cosign)"
    )
    verify = sub.add_parser(
        "verify",
        help="check a release folder's or an image's signatures and provenance",
        description=(
            "For a release folder (dist/release/VERSION): no symlink or special file in it, "
            "SHA256SUMS.sig over SHA256SUMS, every file against SHA256SUMS and none unlisted, "
            "release.json against the files and of the version asked for, the provenance's "
            "signature and that its subjects equal release.json's artifacts (the checks "
            "publish and promote run first). For an image (host/repo:tag or host/repo@digest): "
            "its cosign signature (sha256-<hex>.sig) over the exact payload, which must name "
            "the image's digest, and its attestation (.att) when there is one; only "
            "credentials configured for that registry's own host are sent. Exit 0, or 1 "
            "naming the first mismatch."
        ),
    )
    verify.add_argument(
        "target",
        metavar="RELEASE_FOLDER|IMAGE_REF",
        help="a staged release folder (dist/release/X) or an image reference on a hub",
    )
    verify.add_argument("--key", metavar="PUB", help="the public key (PEM, e.g. cosign.pub)")
    verify.add_argument(
        "--version",
        dest="release_version",
        metavar="X",
        help="the version the release folder must be (default: the folder's name, when it "
        "is a version)",
    )


def run_keygen(args: argparse.Namespace) -> int:
    """Run `keygen`: write the pair and print the two paths."""
    from shipyard.release.keys import generate_keypair

    prefix = str(args.out or "")
    if not prefix or prefix.endswith(("/", ".")):
        raise UsageError(f"--out {prefix!r}: give a file prefix, e.g. --out keys/release")
    private, public = Path(prefix + ".key"), Path(prefix + ".pub")
    generate_keypair(private, public)
    print(f"private key: {private} (mode 0600; keep it secret)")
    print(f"public key: {public}")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    """Run `verify`: print each check that passed; a mismatch raises VerifyError (exit 1)."""
    from shipyard.release.keys import load_public_key

    if not args.key:
        raise UsageError("verify needs --key PUB, the public key of the signing pair")
    public = load_public_key(Path(args.key))
    target = str(args.target)
    if Path(target).is_dir() or Path(target).is_symlink():
        from shipyard.release.verification import verify_release

        for line in verify_release(Path(target), public, args.release_version):
            print(f"ok {line}")
        print(f"verified {target}")
        return 0
    if args.release_version:
        raise UsageError("--version applies to a release folder, not to an image reference")
    return _verify_image(target, public)


def _verify_image(target: str, public: object) -> int:
    from cryptography.hazmat.primitives.asymmetric import ec

    from shipyard.oci.remote.push import pull_registry
    from shipyard.oci.remote.reference import InvalidReference, parse_reference
    from shipyard.release.keys import VerifyError
    from shipyard.release.provenance import verify_image_attestation
    from shipyard.release.signing import attached_tag, verify_image_signature

    assert isinstance(public, ec.EllipticCurvePublicKey)
    try:
        if Path(target).exists():
            raise InvalidReference(target, "reference", "is a file")
        ref = parse_reference(target)
    except InvalidReference as exc:
        raise UsageError(
            f"{exc.text}: not a release folder (no such directory) nor an image reference "
            f"({exc.part}: {exc.args[0].rpartition(': ')[2]}); give dist/release/VERSION or "
            "host[:port]/repo:tag or host[:port]/repo@sha256:..."
        ) from None
    # Verifying only reads: the global push credentials never go to the host named
    # here, which may be anyone's (only that host's own configured ones are sent).
    registry = pull_registry(ref.registry)
    digest = registry.manifest_exists(ref.repository, ref.identifier)
    if digest is None:
        raise VerifyError(f"{ref} does not exist on {ref.registry}")
    if ref.digest is not None and digest != ref.digest:
        raise VerifyError(f"{ref} resolves to {digest}")
    where = f"{ref.name}@{digest}"
    verify_image_signature(registry, ref.repository, digest, public)
    print(f"ok {ref.name}:{attached_tag(digest, 'sig')}: signature over the payload naming {where}")
    statement = verify_image_attestation(registry, ref.repository, digest, public)
    if statement is not None:
        print(f"ok {ref.name}:{attached_tag(digest, 'att')}: {statement.get('predicateType')}")
    print(f"verified {where}")
    return 0
