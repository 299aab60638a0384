"""Images that need `RUN`: built by the Docker engine per platform, then one index.

A binary with `image: {dockerfile: PATH}` is built with the docker SDK once per
platform (arm64 under QEMU), each result is read back from `docker save` into
the same OCI model the daemonless builder uses, and the platforms are written as
one index in dist/images/<binary>/, the same outputs as any other image. The
build context is the Dockerfile's folder plus the binary's wheel under
`.shipyard/wheels/`, so a Dockerfile can install it without any network.

The context is streamed to the engine as one tar, never copied into the tree
(a Dockerfile at the repository root would copy dist/ into itself). It leaves
out what `.dockerignore` lists, read as the Docker CLI reads it (the docker
SDK's matcher: `#` comments, `*`, `?`, `**`, `!` exceptions, a leading `/`), and
always the folders that are never build input: dist/, .git/ (at any depth),
.venv/, .nox/ and .shipyard/ (shipyard's own folder, whose `wheels/` it fills).

The engine keeps nothing of a build once it is read back, whether it worked or
not: each platform's `shipyard-build/<binary>:<suffix>` tag is removed with the
untagged layers under it, and so is every untagged, undigested image the build
log names that nothing else uses (the steps of a build that failed). An image
with a tag or a digest (the base, pulled), or one another image or container
still uses, is left alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tarfile
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from shipyard._environ import DOCKER_NETWORK
from shipyard.artifacts import Artifact, select
from shipyard.builders.image.outputs import write_images
from shipyard.builders.image.variants import no_dockerfile_variants
from shipyard.builders.kinds import dockerfile_inputs, dockerfile_path
from shipyard.dist import action_log, temp_prefix
from shipyard.engine.cache.local import blob_store
from shipyard.engine.context import BuildContext
from shipyard.engine.keys import ActionKey, Inputs
from shipyard.engine.plan import Action
from shipyard.errors import ShipyardError
from shipyard.oci.archive import read_docker_archive
from shipyard.oci.model import Image

__all__ = ["DockerfileBuilder", "context_names"]

# Never build input, whatever .dockerignore says: listed after its patterns, so a
# `!` exception cannot bring them back (the last matching pattern wins).
_NEVER = ("dist", "**/.git", ".venv", ".nox", ".shipyard")
_WHEELS = ".shipyard/wheels"


class DockerfileBuilder:
    """Builds `image.dockerfile` images with the Docker engine, one build per platform."""

    kind = "image"

    def inputs(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Inputs:
        """The Dockerfile's folder, the wheel, platforms, settings, clock and versions."""
        return dockerfile_inputs(action, ctx, deps)

    def build(
        self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], key: ActionKey
    ) -> tuple[Artifact, ...]:
        """Build each platform with the engine, read them back, write the index.

        What the Dockerfile installs is not known here: the artifacts' metadata
        says so (`installed` is None)."""
        binary = action.binaries[0]
        no_dockerfile_variants(binary, action.image.variants if action.image else {})
        import docker
        from docker.errors import APIError, DockerException
        from docker.errors import BuildError as DockerBuildError

        dockerfile = dockerfile_path(action, ctx)
        ctx.logs.mkdir(parents=True, exist_ok=True)
        log = action_log(ctx.dist, self.kind, action.binaries)
        images: dict[str, Image] = {}
        client: Any = None
        tags: list[str] = []  # what the engine holds of these builds, removed at the end
        steps: list[str] = []
        try:
            client = docker.from_env(environment=dict(ctx.env))
            ctx.dist.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix=temp_prefix(), dir=ctx.dist) as tmp:
                context = _context(Path(tmp), dockerfile, ctx.dist, deps)
                # One platform after the other, unlike the other builders: both
                # builds pull the same base tag, which the engine's image store
                # holds for one platform at a time.
                with log.open("w") as out:
                    for platform in action.platforms:
                        suffix = hashlib.sha256(platform.encode()).hexdigest()[:12]
                        tag = f"shipyard-build/{binary}:{suffix}"
                        tags.append(tag)
                        built = _engine_build(
                            client, context, dockerfile.name, platform, tag, ctx, out, steps
                        )
                        saved = Path(tmp) / f"{platform.replace('/', '_')}.tar"
                        images[platform] = _read_back(built, saved, ctx)
        except (DockerBuildError, APIError) as exc:
            raise ShipyardError(f"docker build failed: {exc} (log: {log})") from None
        except DockerException as exc:
            raise ShipyardError(
                f"the Docker engine is not reachable ({exc}); start dockerd or set DOCKER_HOST"
            ) from None
        finally:
            if client is not None:
                _remove_build_images(client, tags, steps)
        return write_images(binary, ctx, images, None)


def _context(tmp: Path, dockerfile: Path, dist: Path, deps: Sequence[Artifact]) -> Path:
    """The build context as one tar in `tmp`: the Dockerfile's folder as the engine would
    send it (`context_names`), then the wheels among `deps`."""
    context = tmp / "context.tar"
    try:
        names = context_names(dockerfile.parent, dockerfile.name, dist)
        with context.open("wb") as handle:
            wheels = [a.path for a in select(deps, kind="wheel")]
            _write_context(handle, dockerfile.parent, names, wheels)
    except OSError as exc:
        raise ShipyardError(f"the build context: {exc}") from None
    return context


def _engine_build(
    client: Any,
    context: Path,
    dockerfile: str,
    platform: str,
    tag: str,
    ctx: BuildContext,
    out: IO[str],
    steps: list[str],
) -> Any:
    """The engine's image of `platform`, built from the `context` tar and tagged `tag`,
    without network unless $SHIPYARD_DOCKER_NETWORK says; its output goes to `out`
    and the images its steps left to `steps`, also when it fails."""
    from docker.errors import BuildError as DockerBuildError

    try:
        with context.open("rb") as sent:
            image, lines = client.images.build(
                fileobj=sent,
                custom_context=True,
                dockerfile=dockerfile,
                platform=platform,
                tag=tag,
                rm=True,
                forcerm=True,
                pull=True,
                network_mode=ctx.env.get(DOCKER_NETWORK.name, DOCKER_NETWORK.default),
                buildargs={
                    "VERSION": ctx.stamp.version,
                    "SOURCE_DATE_EPOCH": str(ctx.stamp.epoch),
                },
            )
    except DockerBuildError as exc:
        steps.extend(_log(out, exc.build_log))  # the steps that worked
        raise
    steps.extend(_log(out, lines))
    return image


def _read_back(image: Any, saved: Path, ctx: BuildContext) -> Image:
    """The engine's `image` in the OCI model: saved to the file `saved`, then read."""
    with saved.open("wb") as handle:
        for chunk in image.save(named=True):
            handle.write(chunk)
    (read,) = read_docker_archive(saved, blob_store(ctx.env))
    return read


# How the engine's classic builder names the image each step leaves: " ---> 1a2b3c4d5e6f".
_STEP_IMAGE = re.compile(r"^ ---> ([0-9a-f]{12})$", re.MULTILINE)


def _log(out: IO[str], lines: Iterable[Any]) -> list[str]:
    """Write the build's output to the log; the image ids its steps name, in order."""
    ids: list[str] = []
    for line in lines:
        text = str(line.get("stream") or line.get("status") or json.dumps(line))
        out.write(text)
        ids.extend(_STEP_IMAGE.findall(line.get("stream") or ""))
    return ids


def _remove_build_images(client: Any, tags: Sequence[str], steps: Sequence[str]) -> None:
    """Leave nothing of the builds in the engine: their tags and the layers only they use.

    Removing a tag prunes the untagged images under it that nothing else uses. A failed
    build has no tag: its steps' images (from the log) are removed, newest first, when
    they have no tag and no digest; the engine refuses (and they stay) when another
    image or a container uses one. Best effort: the build's outcome does not depend on it.
    """
    from docker.errors import DockerException

    for tag in tags:
        # Not made (the build failed first) or already gone: nothing to do.
        with contextlib.suppress(DockerException):
            client.images.remove(image=tag, force=False, noprune=False)
    for image_id in reversed(list(dict.fromkeys(steps))):
        try:
            attrs = client.api.inspect_image(image_id)
            if attrs.get("RepoTags") or attrs.get("RepoDigests"):
                continue  # the base, or an image someone tagged: not ours to remove
            client.images.remove(image=attrs["Id"], force=False, noprune=False)
        except DockerException:
            pass  # gone already, or still used by another image or a container


def context_names(folder: Path, dockerfile: str, dist: Path | None = None) -> list[str]:
    """The sorted paths (files, folders, links; relative to `folder`) a build sends.

    Everything under `folder` but what its `.dockerignore` excludes and the
    folders that are never input (dist/, .git/, .venv/, .nox/, .shipyard/ and
    `dist` itself when it lies inside `folder`). `.dockerignore` and the
    Dockerfile are always sent, as the Docker CLI does.
    """
    from docker.utils.build import exclude_paths

    patterns = _dockerignore(folder / ".dockerignore")
    patterns.extend(_NEVER)
    never = [name for name in _NEVER if "*" not in name]
    if dist is not None and dist.resolve().is_relative_to(folder.resolve()):
        inside = dist.resolve().relative_to(folder.resolve()).as_posix()
        if inside != ".":
            patterns.append("/" + inside)
            never.append(inside)
    names = exclude_paths(str(folder), patterns, dockerfile=dockerfile)
    # The patterns above prune the walk; this is the guarantee. docker-py matches a
    # folder pattern against a parent path only when the pattern is no longer than
    # it, so an exception such as `!.github/...` or `!a/b/.gitkeep` made it walk
    # into .git and send what it found there.
    return sorted(name for name in names if not _never_input(name, never))


def _never_input(name: str, never: Sequence[str]) -> bool:
    """Whether `name` is (or is under) a .git folder at any depth or a `never` folder."""
    if ".git" in name.split("/"):
        return True
    return any(name == top or name.startswith(top + "/") for top in never)


def _dockerignore(path: Path) -> list[str]:
    """The patterns of a .dockerignore: one a line, blank lines and `#` comments left out."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _write_context(out: IO[bytes], folder: Path, names: Sequence[str], wheels: list[Path]) -> None:
    """A tar of `names` under `folder`, then the wheels under `.shipyard/wheels/`."""

    def owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            # One entry each (the list already holds what is below a folder); links
            # stay links and sockets are skipped, as the Docker CLI sends them.
            tar.add(os.path.join(folder, name), arcname=name, recursive=False, filter=owned_by_root)
        for part in (".shipyard", _WHEELS):
            info = owned_by_root(tarfile.TarInfo(part))
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for wheel in wheels:
            tar.add(wheel, arcname=f"{_WHEELS}/{wheel.name}", filter=owned_by_root)
