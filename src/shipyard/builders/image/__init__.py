"""Images without a daemon: base layers, then one layer per rate of change, per platform.

For each platform the binary's wheel and the wheels of the in-repository
libraries it needs are resolved into one site folder for that platform (native
wheels come prebuilt, so nothing runs under emulation), installing from the
binary's lock when it has one (its `requirements:` file or its slice of
uv.lock). The site is then split by RECORD ownership into up to three layers, from
the one that changes least to the one that changes on every edit (`layers`):
third-party dependencies and in-repository libraries, in paths that name no binary
so binaries share their blobs, then the binary's own distribution and its entry
script. Each platform's image is its base, these layers and the config
(`assembly`). Everything lives under /opt so the image works on any base whose
`python3` is the target version (Debian's /usr/bin/python3 does not read
/usr/local/lib/python3.X/site-packages).

As for a zipapp, the entry point's module must be in the resolved site of every
platform, and the native libraries its extension modules need must be in the base
or the image (`native`), or the build fails before any layer is written.

A build of some of a binary's platforms (`--platform linux/arm64`) keeps the
other platforms of the image already in dist/images/<binary>/ only when that
image was built from the same inputs but the platforms (the
`dev.shipyard.image.inputs` annotation of the layout's index.json entry, which is
never pushed, `build_identity`): same wheels, lock,
settings, base, stamp and version, so the kept manifests are the very ones a
build of every platform would make (`kept`). The kept manifests are part of the
action's key. Anything else (another version, an edited source, an image from an
older shipyard) is not kept: the index then holds the subset only, and `push`
refuses it until every declared platform is built (or `--allow-partial` is passed).
The build writes the OCI layout only; a platform's `docker load` tarball (tags of
its own) is written from it on request (`archives`, `shipyard load`).

`image.variants` (`variants.py`) are built in the same action from the same
resolved sites and the same layer blobs: only the base and the config differ.
Each variant is written as a layout of its own, `variants/<name>/` inside the
default's folder; a variant equal to the default holds the default's index.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from packaging.utils import canonicalize_name

from shipyard.artifacts import Artifact, select
from shipyard.builders.image.assembly import platform_images
from shipyard.builders.image.kept import kept_images
from shipyard.builders.image.layers import (
    DEPS_SITE,
    LIBS_SITE,
    SHARED_EPOCH,
    Roles,
    entry_script,
    normal_name,
    split_site,
    write_layers,
)
from shipyard.builders.image.outputs import write_images
from shipyard.builders.image.variants import DEFAULT, VariantPlan, plan_variants
from shipyard.builders.kinds import check_entrypoint, daemonless_inputs, image_settings
from shipyard.builders.locks import requirements_for
from shipyard.builders.origin import resolve_site
from shipyard.builders.resolve import Resolution, resolve
from shipyard.builders.wheel import build_env
from shipyard.dist import action_log, image_layout, temp_prefix
from shipyard.engine.cache.local import blob_store
from shipyard.engine.context import BuildContext, map_parts
from shipyard.engine.keys import ActionKey, Inputs
from shipyard.engine.plan import Action
from shipyard.errors import ShipyardError
from shipyard.manifest import Image as ImageSettings
from shipyard.oci.base import Base, load_base
from shipyard.oci.keep import BUILD_NOTE, build_identity, kept_platforms, with_kept
from shipyard.oci.keys import GZIP_LEVEL
from shipyard.oci.layer import BlobStore
from shipyard.oci.model import Image

__all__ = [
    "BUILD_NOTE",
    "DEPS_SITE",
    "LIBS_SITE",
    "SHARED_EPOCH",
    "ImageBuilder",
    "Resolver",
    "build_identity",
    "check_entrypoint",
    "entry_script",
    "kept_platforms",
    "split_site",
    "write_images",
]

Resolver = Callable[..., Resolution]


def _wheel_name(artifact: Artifact) -> str:
    wheel = artifact.metadata.wheel
    return str(canonicalize_name(wheel.name if wheel else artifact.path.name.split("-", 1)[0]))


def _own_wheel(action: Action, wheels: Sequence[Artifact]) -> tuple[Artifact, list[Artifact]]:
    """The binary's own wheel and the in-repository libraries' wheels among `wheels`.

    The own wheel is the one named like the action's project; an action that names
    no project must have exactly one wheel.
    """
    if not action.project:
        if len(wheels) != 1:
            many = f" ({len(wheels)}, and no project to tell the binary's own)" if wheels else ""
            raise ShipyardError(f"no wheel among its inputs{many}")
        return wheels[0], []
    project = str(canonicalize_name(action.project))
    own = [w for w in wheels if _wheel_name(w) == project]
    if len(own) != 1:
        names = ", ".join(sorted(_wheel_name(w) for w in wheels)) or "none"
        raise ShipyardError(f"no single wheel of {project} among its inputs (wheels: {names})")
    return own[0], [w for w in wheels if w is not own[0]]


class ImageBuilder:
    """Builds a binary's multi-arch image: an OCI layout (tarballs on request: `archives`)."""

    kind = "image"

    def __init__(self, resolver: Resolver = resolve, *, level: int = GZIP_LEVEL) -> None:
        self.resolver = resolver
        self.level = level

    def inputs(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Inputs:
        """The wheels, platforms, entry point, image settings, base, clock and versions,
        and the other platforms' manifests kept from the image in dist/ (`kept_platforms`)."""
        inputs = daemonless_inputs(action, ctx, deps, level=self.level)
        return with_kept(inputs, image_layout(ctx.dist, action.binaries[0]), action.platforms)

    def build(
        self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], key: ActionKey
    ) -> tuple[Artifact, ...]:
        """Resolve, assemble and write dist/images/<binary>/ (an OCI layout)."""
        settings = image_settings(action)
        ctx.logs.mkdir(parents=True, exist_ok=True)
        log = action_log(ctx.dist, self.kind, action.binaries)
        log.write_bytes(b"")
        own, libraries = _wheels(action, settings, deps)
        roles = Roles(
            action.binaries[0],
            action.entrypoint,
            normal_name(_wheel_name(own)),
            frozenset(normal_name(_wheel_name(w)) for w in libraries),
        )
        plan = plan_variants(settings)
        store = blob_store(ctx.env)
        loaded = _load_bases(plan, action.platforms, ctx, store)
        ctx.dist.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=temp_prefix(), dir=ctx.dist) as tmp:
            wheels = [own.path, *(w.path for w in libraries)]
            by_python = self._sites(action, ctx, plan, wheels, Path(tmp), log)
            from shipyard.builders.image.native import check_native  # read once sites exist

            check_native(action.platforms, plan, loaded, by_python, roles, store, settings)
            layers_of = {
                py: write_layers(
                    ctx,
                    {p: r.site for p, r in zip(action.platforms, rs, strict=True)},
                    roles,
                    store,
                    self.level,
                )
                for py, rs in by_python.items()
            }
            by_flavour = [
                platform_images(action, ctx, loaded[f.base], layers_of[f.python], roles, f)
                for f in plan.flavours
            ]
            return self._write(action, ctx, key, plan, by_flavour, by_python, log)

    def _sites(
        self,
        action: Action,
        ctx: BuildContext,
        plan: VariantPlan,
        wheels: Sequence[Path],
        tmp: Path,
        log: Path,
    ) -> dict[str, Sequence[Resolution]]:
        """The resolved site of each platform (in the action's order) for each target
        Python the flavours need ("" is the image's own), by Python; every site is
        checked to hold the repository's projects from their wheels only and the entry
        point before any layer is written."""
        env = build_env(ctx)
        requirements = requirements_for(action, ctx, tmp)
        pythons = list(dict.fromkeys(f.python for f in plan.flavours))

        def site(part: tuple[str, str]) -> Resolution:
            python, platform = part
            dest = tmp / (f"py{python}" if python else "") / platform.replace("/", "_")
            target = (python or ctx.python, platform)
            return resolve_site(
                self.resolver,
                action,
                ctx,
                wheels,
                target,
                dest,
                env=env,
                log=log,
                requirements=requirements,
            )

        parts = [(py, p) for py in pythons for p in action.platforms]
        resolved = map_parts(ctx, site, parts)
        for resolution in resolved:  # before any layer is written
            check_entrypoint(
                action.entrypoint, action.binaries[0], resolution.site, resolution.platform
            )
        width = len(action.platforms)
        return {py: resolved[i * width : (i + 1) * width] for i, py in enumerate(pythons)}

    def _write(
        self,
        action: Action,
        ctx: BuildContext,
        key: ActionKey,
        plan: VariantPlan,
        by_flavour: Sequence[Sequence[Image]],
        by_python: dict[str, Sequence[Resolution]],
        log: Path,
    ) -> tuple[Artifact, ...]:
        """Write the image of each flavour (`by_flavour`, one image per platform) with
        the platforms it keeps of the image in dist/, and what each platform installed."""
        binary, platforms = action.binaries[0], action.platforms
        identity = build_identity(key.inputs)
        layout = image_layout(ctx.dist, binary)
        others, kept_variants = kept_images(layout, key.inputs, identity, plan, platforms)
        if others:
            with log.open("a", encoding="utf-8") as out:
                names = ", ".join(str(i.platform) for i in others)
                out.write(f"kept {names} of the image in dist/ (built from the same inputs)\n")
        installed_of = {py: tuple(r.installed() for r in rs) for py, rs in by_python.items()}
        variants = {
            name: (
                dict(zip(platforms, by_flavour[i], strict=True)),
                kept_variants.get(name, others),
                plan.collapsed(name),
            )
            for name, i in plan.chosen
            if name != DEFAULT
        }
        return write_images(
            binary,
            ctx,
            dict(zip(platforms, by_flavour[0], strict=True)),
            installed_of[""],
            kept=others,
            notes={BUILD_NOTE: identity},
            variants=variants,
            variant_installed={
                name: installed_of[plan.flavours[i].python]
                for name, i in plan.chosen
                if plan.flavours[i].python
            },
        )


def _wheels(
    action: Action, settings: ImageSettings, deps: tuple[Artifact, ...]
) -> tuple[Artifact, list[Artifact]]:
    """The binary's own wheel and the libraries' wheels, once the action has what a
    daemonless image needs; ShipyardError naming every problem otherwise."""
    problems = {
        "no platforms": not action.platforms,
        "no base image (set image.base)": not settings.base,
        "image.dockerfile builds need the Docker engine, not this builder": bool(
            settings.dockerfile
        ),
        f"binary {action.binaries[0]} has no entrypoint (module:function)": not action.entrypoint,
    }
    try:
        own, libraries = _own_wheel(action, list(select(deps, kind="wheel")))
    except ShipyardError as exc:
        problems = {str(exc): True, **problems}
    missing = [reason for reason, bad in problems.items() if bad]
    if missing or settings.base is None:
        raise ShipyardError("; ".join(missing))
    return own, libraries


def _load_bases(
    plan: VariantPlan, platforms: Sequence[str], ctx: BuildContext, store: BlobStore
) -> dict[str, dict[str, Base]]:
    """Each distinct base of the plan's flavours, loaded once for `platforms`."""
    loaded: dict[str, dict[str, Base]] = {}
    for flavour in plan.flavours:
        if flavour.base not in loaded:
            loaded[flavour.base] = load_base(
                flavour.base, platforms, root=ctx.root, store=store, env=ctx.env,
                each_of=lambda fn, items: map_parts(ctx, fn, items),
            )  # fmt: skip
    return loaded
