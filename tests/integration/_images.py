"""Running what a build wrote: an image tarball (written from its layout: builds write
none) loaded into the Docker engine and run."""

from __future__ import annotations

import subprocess
from pathlib import Path

from shipyard.builders.image.archives import write_archive

__all__ = ["image_says", "tarball"]


def tarball(dist: Path, binary: str, platform: str, variant: str = "") -> Path:
    """The `docker load` tarball of `binary`'s image for `platform`, written from its
    layout in `dist` (as `shipyard load --output` does), under its usual name."""
    return write_archive(dist, binary, platform, variant=variant)[0]


def image_says(root: Path, binary: str, platform: str) -> str:
    """What the image of `binary` for `platform` (from root/dist/images) prints, run by
    Docker with no network (arm64 under QEMU); its tags are removed afterwards."""
    loaded = subprocess.run(
        ["docker", "load", "-i", str(tarball(root / "dist", binary, platform))],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    tag = loaded.stdout.strip().rpartition("Loaded image: ")[2]
    try:
        done = subprocess.run(
            ["docker", "run", "--rm", "--network", "none", "--platform", platform, tag],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)
