"""Images that need `RUN`: built by the Docker engine per platform, then one index.

A binary with `image: {dockerfile: PATH}` is built with the docker SDK once per
platform (arm64 under QEMU), each result is read back from `docker save` into
the same OCI model the daemonless builder uses, and the platforms are written as
one index in dist/images/<binary>/, the same outputs as any other image. The
build context is the Dockerfile's folder plus the binary's wheel under
`.shipyard/wheels/`, so a Dockerfile can install it without any network.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from shipyard._fs import TEMP_PREFIX
from shipyard.build.engine import Artifact, BuildContext, Outcome
from shipyard.build.image import write_images
from shipyard.build.kinds import dockerfile_key, dockerfile_path
from shipyard.build.plan import Action
from shipyard.errors import BuildError
from shipyard.oci.archive import read_docker_archive
from shipyard.oci.base import blob_store
from shipyard.oci.model import Image

__all__ = ["DockerfileBuilder"]


class DockerfileBuilder:
    """Builds `image.dockerfile` images with the Docker engine, one build per platform."""

    kind = "image"

    def key(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> str:
        """The Dockerfile's folder, the wheel, platforms, settings, clock and versions."""
        return dockerfile_key(action, ctx, deps)

    def build(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Outcome:
        """Build each platform with the engine, read them back, write the index."""
        import docker
        from docker.errors import APIError, DockerException
        from docker.errors import BuildError as DockerBuildError

        binary = action.binaries[0]
        dockerfile = dockerfile_path(action, ctx)
        ctx.logs.mkdir(parents=True, exist_ok=True)
        log = ctx.logs / f"image-{binary}.log"
        images: dict[str, Image] = {}
        try:
            client = docker.from_env(environment=dict(ctx.env))
            with tempfile.TemporaryDirectory(prefix=TEMP_PREFIX, dir=ctx.dist) as tmp:
                context = Path(tmp) / "context"
                shutil.copytree(dockerfile.parent, context, symlinks=True)
                wheels = context / ".shipyard" / "wheels"
                wheels.mkdir(parents=True, exist_ok=True)
                for artifact in deps:
                    shutil.copy2(artifact.path, wheels / artifact.path.name)
                # One platform after the other, unlike the other builders: both
                # builds pull the same base tag, which the engine's image store
                # holds for one platform at a time.
                with log.open("w") as out:
                    for platform in action.platforms:
                        suffix = hashlib.sha256(platform.encode()).hexdigest()[:12]
                        tag = f"shipyard-build/{binary}:{suffix}"
                        image, lines = client.images.build(
                            path=str(context),
                            dockerfile=dockerfile.name,
                            platform=platform,
                            tag=tag,
                            rm=True,
                            forcerm=True,
                            pull=True,
                            network_mode=ctx.env.get("SHIPYARD_DOCKER_NETWORK", "none"),
                            buildargs={
                                "VERSION": ctx.stamp.version,
                                "SOURCE_DATE_EPOCH": str(ctx.stamp.epoch),
                            },
                        )
                        _log(out, lines)
                        saved = Path(tmp) / f"{platform.replace('/', '_')}.tar"
                        with saved.open("wb") as handle:
                            for chunk in image.save(named=True):
                                handle.write(chunk)
                        (read,) = read_docker_archive(saved, blob_store(ctx.env))
                        images[platform] = read
        except (DockerBuildError, APIError) as exc:
            raise BuildError(action.id, f"docker build failed: {exc}", log=log) from None
        except DockerException as exc:
            raise BuildError(
                action.id,
                f"the Docker engine is not reachable ({exc}); start dockerd or set DOCKER_HOST",
                log=log,
            ) from None
        outputs = write_images(binary, ctx, images)
        return Outcome(self.key(action, ctx, deps), outputs, log)


def _log(out: Any, lines: Any) -> None:
    for line in lines:
        text = line.get("stream") or line.get("status") or json.dumps(line)
        out.write(str(text))
