"""`shipyard promote`: a staged release's images and wheels copied to the final places.

Only argparse is imported until the command runs. Running it plans nothing and
runs no builder: `shipyard.release.promote` itself imports no part of the build
engine, the builders or the release stages (tests/unit/test_promote.py checks
that); the command reads dist/release/VERSION, talks to registries and the
package index, and writes nothing under dist/ but a scratch folder it removes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from shipyard.errors import UsageError
from shipyard.manifest import Manifest

__all__ = ["add_parser", "run"]


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Register `promote` on the CLI's subcommands."""
    promote = sub.add_parser(
        "promote",
        parents=[common],
        help="copy a staged release to the final hubs",
        description=(
            "Copy every image of a staged release by digest from the staging hub to the "
            "final hubs, attach its SBOMs there and (with a signing key) sign it and attach "
            "its provenance, upload its wheels to the package index, then move the tags and "
            "verify every digest against dist/release/VERSION/release.json. Nothing is built."
        ),
    )
    promote.add_argument(
        "--from",
        dest="from_hub",
        metavar="HUB",
        help="the staging hub the release was published to, host[:port]/path",
    )
    promote.add_argument(
        "--version",
        dest="release_version",
        metavar="X",
        help="the staged release in dist/release/X (default: $VERSION)",
    )
    promote.add_argument(
        "--to",
        action="append",
        metavar="HUB",
        help="a final hub for every image (default: image.hubs); repeatable, a,b ok",
    )
    promote.add_argument("--dry-run", action="store_true", help="check and print the steps only")
    promote.add_argument("--index-url", help="package index upload URL ($SHIPYARD_INDEX_URL)")
    promote.add_argument(
        "--force-protected",
        action="store_true",
        help="promote to image.protected hubs outside CI (default: only when CI is set)",
    )
    promote.add_argument(
        "--clobber",
        action="store_true",
        help="move existing tags that are not image.movable_tags (default: refuse)",
    )
    promote.add_argument(
        "--signing-key",
        metavar="PATH",
        help="PEM ECDSA P-256 key to sign the images at the final hubs with "
        "(default: $SHIPYARD_SIGNING_KEY); needed when the release was staged signed",
    )
    promote.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace, manifest: Manifest) -> int:
    """Run `promote`; its exit code (errors are raised to the CLI's one handler)."""
    from shipyard.engine.plan import split_flag
    from shipyard.release.index import index_from_env
    from shipyard.release.keys import load_signing_key
    from shipyard.release.promote import PromoteOptions, plan_promotion, promote

    if not args.from_hub:
        raise UsageError("promote needs --from=HUB, the staging hub the release was published to")
    version = args.release_version or os.environ.get("VERSION")
    if not version:
        raise UsageError("promote needs --version=X (or $VERSION): the release in dist/release/X")
    options = PromoteOptions(
        source=args.from_hub,
        version=version,
        to=tuple(split_flag(args.to)),
        dry_run=args.dry_run,
        force_protected=args.force_protected,
        clobber=args.clobber,
    )
    # The key first: a bad one stops the command before anything is read or sent.
    key = load_signing_key(args.signing_key, os.environ)
    promotion = plan_promotion(manifest, options, os.environ, key)
    index = index_from_env(os.environ, args.index_url)
    result = promote(
        promotion,
        index=index,
        dry_run=args.dry_run,
        signing_key=key,
        on_step=lambda line: print(line, file=sys.stderr),
    )
    if args.json:
        print(json.dumps({"version": version, "dry_run": args.dry_run, **result.to_json()}))
    elif not args.dry_run:
        for image in result.images:
            print(f"{image.repository}@{image.digest} tags: {', '.join(image.tags)}")
        print(
            f"promoted {version}: {len(result.images)} image(s), {result.blobs_mounted} blob(s) "
            f"mounted, {result.blobs_copied} copied ({result.bytes_copied} bytes), "
            f"{result.blobs_present} already there, {result.sboms_attached} SBOM(s) attached, "
            f"{result.signatures_pushed} signature(s) and {result.attestations_pushed} "
            f"attestation(s) pushed, {result.tags_moved} tag(s) moved, "
            f"{result.wheels_uploaded} wheel(s) uploaded"
        )
    return 0
