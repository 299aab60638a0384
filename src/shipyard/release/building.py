"""The build and validate stages: run the lead's build engine, then check what it made."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.metadata import InvalidMetadata, Metadata
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from shipyard.artifacts import ANY, Artifact, select
from shipyard.engine.build import BuildRequest, build
from shipyard.engine.plan import Action
from shipyard.engine.scheduler import Result
from shipyard.engine.sizes import check_sizes
from shipyard.errors import BuildError, ShipyardError
from shipyard.oci.model import Platform
from shipyard.process import without_secrets
from shipyard.release.context import ReleaseContext

if TYPE_CHECKING:
    from docker import DockerClient

__all__ = ["Build", "Validate", "artifacts", "build_request", "check_wheel", "released_wheels"]

_RESUMING = "resuming: publishing the release staged earlier"
_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "AMD64": "amd64"}


def artifacts(ctx: ReleaseContext) -> tuple[Artifact, ...]:
    """Every artifact the build made or restored, in plan order (filter with `select`)."""
    if ctx.build is None:
        return ()
    return tuple(a for r in ctx.build.results for a in r.outputs)


def released_wheels(ctx: ReleaseContext) -> list[tuple[Result, Artifact]]:
    """The wheels the release ships, with the result that built each: those of binaries
    that declare a `wheel` output, and the in-repo libraries those require. Wheels
    built only as inputs of zipapps and images are not released (nor checked as such)."""
    declared = {b.name for b in ctx.plan.binaries if "wheel" in b.outputs}
    libraries = ctx.libraries()
    return [
        (result, art)
        for result in (ctx.build.results if ctx.build else ())
        for art in select(result.outputs, kind="wheel")
        if declared & set(result.action.binaries)
        or (not result.action.binaries and result.action.project in libraries)
    ]


def _takes_release_version(action: Action) -> bool:
    """Whether the wheel's version is shipyard's (a git-derived version, which shipyard
    sets through the backend's override): a project that declares its own version
    (static, a version file, a module attribute) ships that version, release or not."""
    from shipyard.builders.wheel import project_vcs_backend

    return bool(action.binaries) and project_vcs_backend(action.source) is not None


def build_request(ctx: ReleaseContext) -> BuildRequest:
    """What the release asks of the build engine: the release's version, its -j, and
    the local and shared caches (and the shared cache's mode), as `shipyard build` would
    be asked."""
    return BuildRequest(
        version=ctx.stamp.version,
        jobs=ctx.options.jobs,
        cache_dir=ctx.options.cache_dir,
        remote=ctx.options.remote,
        cache_mode=ctx.options.cache_mode,
        env=ctx.env,
    )


class Build:
    """Builds every output of the plan with the build engine (cache and all)."""

    name = "build"

    def skip(self, ctx: ReleaseContext) -> str | None:
        """Skipped when resuming: the staged release is what gets published."""
        return _RESUMING if ctx.resuming else None

    def run(self, ctx: ReleaseContext) -> None:
        """Build as `shipyard build --version=<the release's version>` builds: the same
        engine entry (`build_request`), each action with its own stamp (its revision and
        clock from the last commit that changed its inputs; the release's version for
        all), the registry cache too. Any failed action fails the stage, naming it."""
        ctx.build = build(ctx.plan, build_request(ctx), ctx.builders, stamp=ctx.stamp)
        if ctx.build.failed:
            first = ctx.build.failed[0]
            raise BuildError(
                first.action.id,
                f"{len(ctx.build.failed)} action(s) failed: {first.reason}",
                log=first.log,
            )


def check_wheel(path: Path, version: str | None) -> None:
    """Check a wheel's METADATA as `twine check` would, and that it carries `version`
    (None: any; an in-repo library keeps its own)."""
    name, wheel_version, _, _ = parse_wheel_filename(path.name)
    with zipfile.ZipFile(path) as archive:
        meta_name = next(
            (n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)), None
        )
        if meta_name is None:
            raise BuildError(f"wheel {path.name}", "no .dist-info/METADATA")
        raw = archive.read(meta_name)
    try:
        meta = Metadata.from_email(raw, validate=True)
    except (InvalidMetadata, ExceptionGroup) as exc:
        raise BuildError(f"wheel {path.name}", f"invalid METADATA: {exc}") from None
    if canonicalize_name(meta.name) != name or meta.version != wheel_version:
        raise BuildError(
            f"wheel {path.name}", f"METADATA says {meta.name} {meta.version}; the file name differs"
        )
    if version is not None and meta.version != Version(version):
        raise BuildError(f"wheel {path.name}", f"has version {meta.version}, release is {version}")


def _runs_here(artifact: Artifact) -> bool:
    """Whether a zipapp runs on this machine: a universal one, or one for its architecture."""
    if artifact.platform == ANY:
        return True
    arch = _ARCH.get(platform.machine(), platform.machine())
    return Platform.parse(artifact.platform).architecture == arch


def _interpreter(zipapp: Path) -> str | None:
    """The interpreter that runs `zipapp` here: this one, unless the zipapp was built
    for one of several Pythons that is not this one (build.json's `archive_python`);
    then `python3.X` on PATH, or None when there is none."""
    from shipyard.builders.zipapp import zipapp_info

    try:
        wanted = zipapp_info(zipapp).get("archive_python")
    except ShipyardError:
        return sys.executable  # not ours to judge: the smoke run says what is wrong
    if not wanted or wanted == f"{sys.version_info.major}.{sys.version_info.minor}":
        return sys.executable
    return shutil.which(f"python{wanted}")


def _host_platform() -> str:
    return f"linux/{_ARCH.get(platform.machine(), platform.machine())}"


def _smoke_images(ctx: ReleaseContext) -> None:
    """Run each image's smoke arguments in its host-platform image, when Docker is reachable.

    The image (each variant) is loaded from a `docker load` tarball written from its
    layout for the smoke run only (builds write none), run with no network, then
    removed from the engine. Without a Docker engine the smoke runs are skipped, and
    each skip is reported through `ctx.on_step` (a release needs no Docker engine).
    """
    host = _host_platform()
    wanted = [
        (artifact.binary, artifact)
        for artifact in select(artifacts(ctx), kind="image")
        if ctx.binary(artifact.binary).smoke
        and artifact.metadata.image is not None
        and host in artifact.metadata.image.platforms
    ]
    if not wanted:
        return
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(environment=dict(ctx.env))
        client.ping()
    except DockerException as exc:
        for name, _ in wanted:
            ctx.on_step(f"image smoke skipped for {name}: no Docker engine ({exc})")
        return
    try:
        for name, artifact in wanted:
            with tempfile.TemporaryDirectory(prefix="shipyard-smoke-") as tmp:
                tarball = _smoke_tarball(ctx, artifact, host, Path(tmp))
                said = _smoke_image(client, name, tarball, list(ctx.binary(name).smoke), host)
            ctx.on_step(f"image smoke {name} ({tarball.name}) on {host}: {said}")
    finally:
        client.close()


def _smoke_tarball(ctx: ReleaseContext, artifact: Artifact, host: str, folder: Path) -> Path:
    """The `docker load` tarball of the `image` artifact's image for `host`, in `folder`."""
    from shipyard.builders.image.archives import archive_path, write_archive
    from shipyard.builders.image.variants import variant_of

    variant = variant_of(artifact)
    name = archive_path(ctx.dist, artifact.binary, host, variant).name
    tarball, _ = write_archive(ctx.dist, artifact.binary, host, variant=variant, dest=folder / name)
    return tarball


def _smoke_image(
    client: DockerClient, binary: str, tarball: Path, smoke: list[str], host: str
) -> str:
    """Load `binary`'s `docker load` tarball `tarball`, run `smoke` in it with no network
    and remove what was loaded; the start of what it printed. BuildError when it fails."""
    from docker.errors import ContainerError, DockerException

    what = f"image smoke {binary} ({tarball.name})"
    image = None
    try:
        with tarball.open("rb") as handle:
            (image, *_) = client.images.load(handle)
        output = client.containers.run(
            image, smoke, network_mode="none", platform=host, remove=True, stdout=True, stderr=True
        )
    except ContainerError as exc:
        raw: object = exc.stderr or b""
        text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        loaded = str(image.id) if image is not None else tarball.name
        raise BuildError(
            what,
            f"exit {exc.exit_status} in {host}: {text.strip()[-400:]}",
            command=["docker", "run", "--network", "none", loaded, *smoke],
        ) from None
    except DockerException as exc:
        raise BuildError(what, f"Docker failed: {exc}") from None
    finally:
        # The engine keeps nothing of a smoke run: the tags the tarball loaded
        # go (and the image with its last tag), an image also tagged otherwise stays.
        for tag in image.tags if image is not None else ():
            with contextlib.suppress(DockerException):
                client.images.remove(tag)
    said = output.decode(errors="replace") if isinstance(output, bytes) else str(output)
    return said.strip()[:200]


def _check_sizes(ctx: ReleaseContext) -> None:
    """Every output within its binary's size budget; each breach named, then exit 1."""
    findings = check_sizes(ctx.plan.binaries, ctx.build.results if ctx.build else ())
    if findings:
        lines = [f.message(ctx.root) for f in findings]
        raise BuildError(
            "size budget",
            "\n  ".join(lines)
            + "\n  make the output smaller, or raise the budget in binaries.yaml",
        )


class Validate:
    """Size budgets, smoke runs of zipapps, wheel metadata, and every platform in each image."""

    name = "validate"

    def skip(self, ctx: ReleaseContext) -> str | None:
        """Skipped when resuming (the staged release was validated when it was made)."""
        return _RESUMING if ctx.resuming else None

    def run(self, ctx: ReleaseContext) -> None:
        """Raise BuildError naming the first artifact that fails."""
        built = artifacts(ctx)
        _check_sizes(ctx)
        for result, artifact in released_wheels(ctx):
            # A wheel whose version shipyard sets carries the release's; the others
            # (declared versions, libraries) their own, which the wheel build checked.
            version = ctx.stamp.version if _takes_release_version(result.action) else None
            check_wheel(artifact.path, version)
        for artifact in select(built, kind="zipapp"):
            name = artifact.binary
            smoke = ctx.binary(name).smoke
            if not smoke or not _runs_here(artifact):
                continue
            python = _interpreter(artifact.path)
            if python is None:
                ctx.on_step(
                    f"smoke {artifact.path.name} skipped: built for another Python, and "
                    "no interpreter for it is on PATH"
                )
                continue
            command = [python, str(artifact.path), *smoke]
            try:
                done = subprocess.run(
                    command,
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                    env=without_secrets(os.environ),  # the program under test sees no key
                )
            except subprocess.TimeoutExpired:
                raise BuildError(f"smoke {name}", "timed out after 120s", command=command) from None
            if done.returncode != 0:
                detail = (done.stderr or done.stdout).strip()[-400:]
                raise BuildError(
                    f"smoke {name}", f"exit {done.returncode}: {detail}", command=command
                )
            ctx.on_step(f"smoke {artifact.path.name}: {done.stdout.strip()[:200]}")
        _smoke_images(ctx)
        for binary in ctx.image_binaries():
            images = [
                a for a in select(built, kind="image", binary=binary.name) if a.metadata.image
            ]
            if not images:
                raise BuildError(f"image {binary.name}", "the build made no image")
            (image,) = images[:1]
            assert image.metadata.image is not None
            have = [Platform.parse(text) for text in image.metadata.image.platforms]
            missing = sorted(
                p
                for p in binary.image_platforms
                if not any(Platform.parse(p).matches(h) for h in have)
            )
            if missing:
                raise BuildError(
                    f"image {binary.name}",
                    f"{image.path.parent} lacks platform(s) {', '.join(missing)}",
                )
