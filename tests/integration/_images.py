"""Running what a build wrote: an image tarball loaded into the Docker engine and run."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["image_says"]


def image_says(root: Path, binary: str, platform: str) -> str:
    """What the image of `binary` for `platform` (from root/dist/images) prints, run by
    Docker with no network (arm64 under QEMU); its tags are removed afterwards."""
    flat = platform.replace("/", "_")
    (tarball,) = (root / "dist/images").glob(f"{binary}-*-{flat}.tar")
    loaded = subprocess.run(
        ["docker", "load", "-i", str(tarball)], capture_output=True, text=True, check=True
    )
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
