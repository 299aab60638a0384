"""`shipyard load BINARY`: a built image into the Docker engine, or into a tarball.

A build writes an image's OCI layout only; this writes one platform's `docker load`
tarball from it (`shipyard.builders.image.archives`) and loads it into the engine
(DOCKER_HOST), then removes the tarball; with `--output FILE` it keeps the tarball
there and loads nothing. Only argparse is imported until the command runs.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

__all__ = ["add_parser", "load_command"]


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Register `load` on the CLI's subcommands."""
    load = sub.add_parser(
        "load",
        parents=[common],
        help="load a built image into Docker (or write its docker-load tarball)",
        description=(
            "Write one platform's `docker load` tarball of BINARY's image from its OCI "
            "layout in dist/images/BINARY/ (builds write no tarballs) and load it into the "
            "Docker engine, tagged BINARY:TAG-ARCH; with --output, write it there instead."
        ),
    )
    load.add_argument("binary", metavar="BINARY", help="the binary whose image to load")
    load.add_argument(
        "--platform", metavar="OS/ARCH", help="the platform's image (default: this machine's)"
    )
    load.add_argument("--variant", default="", metavar="NAME", help="an image.variants entry")
    load.add_argument(
        "--output", type=Path, metavar="FILE", help="write the tarball to FILE; load nothing"
    )


def load_command(args: argparse.Namespace) -> int:
    """Write the tarball, and load it unless --output was given."""
    from shipyard.builders.image.archives import host_platform, write_archive
    from shipyard.cli._args import manifest_of
    from shipyard.dist import dist_dir
    from shipyard.errors import UsageError

    dist = dist_dir(manifest_of(args).root)
    wanted = args.platform or host_platform()
    if args.output is not None:
        path, _ = write_archive(
            dist, args.binary, wanted, variant=args.variant, dest=args.output.resolve()
        )
        print(f"wrote {path}")
        return 0
    import docker
    from docker.errors import DockerException

    with tempfile.TemporaryDirectory(prefix="shipyard-load-") as tmp:
        path, _ = write_archive(
            dist, args.binary, wanted, variant=args.variant, dest=Path(tmp) / "image.tar"
        )
        try:
            client = docker.from_env()
            try:
                with path.open("rb") as handle:
                    loaded = client.images.load(handle)
            finally:
                client.close()
        except DockerException as exc:
            raise UsageError(f"could not load the image into Docker: {exc}") from None
    for image in loaded:
        print(f"loaded {', '.join(image.tags) or image.id}")
    return 0
