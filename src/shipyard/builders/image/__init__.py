"""Images without a daemon: base layers, then one layer per rate of change, per platform.

For each platform the binary's wheel and the wheels of the in-repository
libraries it needs are resolved into one site folder for that platform (native
wheels come prebuilt, so nothing runs under emulation), installing from the
binary's lock when it has one (its `requirements:` file or its slice of
uv.lock). The site is then split by RECORD ownership into up to three layers,
from the one that changes least to the one that changes on every edit:

    /opt/shipyard/deps/site/     third-party distributions   "shipyard: third-party dependencies"
    /opt/shipyard/libs/site/     in-repository libraries     "shipyard: in-repo libraries"
    /opt/<binary>/site/          the binary's own distribution
    /opt/<binary>/bin/<binary>   its entry script (the Entrypoint)  "shipyard: <binary> <version>"

The first two paths name no binary and their files carry a fixed time (1980-01-01,
not the binary's SOURCE_DATE_EPOCH), so binaries with the same locked third-party
set get the same dependencies blob, pushed once; an edit to the app changes only
the last layer, an edit to a library the libraries layer (never the third-party
one). An empty layer (no third-party dependencies, no libraries) is left out.
The entry script puts the own, libraries and dependencies sites first on
sys.path in that order, and so does PYTHONPATH. Everything lives under /opt so
the image works on any base whose `python3` is the target version (Debian's
/usr/bin/python3 does not read /usr/local/lib/python3.X/site-packages).

The entry script's folder goes at the end of PATH, so a binary called `echo`
does not shadow /bin/echo for the image's shell scripts. As for a zipapp, the
entry point's module must be in the resolved site of every platform, or the
build fails before any layer is written.

A build of some of a binary's platforms (`--platform linux/arm64`) keeps the
other platforms of the image already in dist/images/<binary>/ only when that
image was built from the same inputs but the platforms (the
`dev.shipyard.image.inputs` annotation of the layout's index.json entry, which is
never pushed, `build_identity`): same wheels, lock,
settings, base, stamp and version, so the kept manifests are the very ones a
build of every platform would make. The kept manifests are part of the action's
key. Anything else (another version, an edited source, an image from an older
shipyard) is not kept: the index then holds the subset only, and `push` refuses
it until every declared platform is built (or `--allow-partial` is passed).
Each platform's `docker load` tarball carries tags of its own (`archive_tags`).

`image.variants` (`variants.py`) are built in the same action from the same
resolved sites and the same layer blobs: only the base and the config differ.
Each variant is written as a layout of its own, `variants/<name>/` inside the
default's folder; a variant equal to the default holds the default's index.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import posixpath
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from packaging.utils import canonicalize_name

from shipyard import _json
from shipyard._fs import sha256_file
from shipyard.artifacts import (
    ANY,
    Artifact,
    Distribution,
    ImageIndex,
    Installed,
    Metadata,
    PlatformManifest,
    select,
)
from shipyard.builders.image.variants import (
    DEFAULT,
    VARIANTS_DIR,
    Flavour,
    VariantPlan,
    plan_variants,
    variant_layout,
)
from shipyard.builders.kinds import daemonless_inputs, image_settings, source_url
from shipyard.builders.locks import requirements_for
from shipyard.builders.origin import from_repository
from shipyard.builders.resolve import Resolution, resolve
from shipyard.builders.wheel import build_env
from shipyard.dist import action_log, image_archive, image_layout, temp_prefix
from shipyard.engine.cache.local import blob_store
from shipyard.engine.context import BuildContext, map_parts
from shipyard.engine.keys import ActionKey, Inputs
from shipyard.engine.plan import Action
from shipyard.errors import ShipyardError, UsageError
from shipyard.manifest import Image as ImageSettings
from shipyard.oci.archive import archive_tags, write_docker_archive
from shipyard.oci.base import DEFAULT_PATH, Base, load_base
from shipyard.oci.keep import BUILD_NOTE, KEPT, build_identity, kept_platforms, with_kept
from shipyard.oci.keys import GZIP_LEVEL
from shipyard.oci.layer import BlobStore, Entry, scan_tree, write_layer
from shipyard.oci.layout import (
    blob_file,
    image_from_json,
    index_entries,
    layout_tops,
    manifest_blobs,
    read_blob,
    replace_dir,
    write_layout,
)
from shipyard.oci.model import (
    Descriptor,
    Image,
    Index,
    Layer,
    OCIError,
    append_layer,
    as_annotations,
    make_index,
    manifest_descriptor,
    with_config,
)
from shipyard.stamp import ZIP_EPOCH

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
_OCI = "org.opencontainers.image."
# Where the layers shared between binaries go: paths that name no binary.
DEPS_SITE = "/opt/shipyard/deps/site"
LIBS_SITE = "/opt/shipyard/libs/site"
# The file time in those layers: fixed, since each binary's stamp has its own epoch.
SHARED_EPOCH = ZIP_EPOCH


def _read_kept(layout: Path, kept: Sequence[str]) -> list[Image]:
    """The images `kept` (`platform@digest`, from the key) names in `layout`, unchanged.

    Each is read back and checked to give the same manifest bytes; a layout that
    changed since the key was made fails the build rather than mixing images.
    """
    if not kept:
        return []
    wanted = {text.partition("@")[2]: text.partition("@")[0] for text in kept}
    images: list[Image] = []
    try:
        (top,) = layout_tops(layout)
        for entry in index_entries(read_blob(layout, top)):
            if entry.digest not in wanted:
                continue
            data = read_blob(layout, entry)
            doc = _json.loads(data)
            config = _json.loads(read_blob(layout, manifest_blobs(data)[0]))
            image = image_from_json(doc, config, lambda d: blob_file(layout, d))
            image = dataclasses.replace(
                image, annotations=as_annotations(doc.get("annotations") or {})
            )
            if manifest_descriptor(image).digest != entry.digest:
                raise OCIError(f"its {wanted[entry.digest]} manifest does not read back the same")
            images.append(image)
    except (OCIError, ValueError, TypeError) as exc:
        raise ShipyardError(
            f"{layout}: cannot keep its other platforms ({exc}); build every platform"
        ) from None
    if len(images) != len(wanted):
        raise ShipyardError(
            f"{layout} changed during the build: its {', '.join(sorted(wanted.values()))} "
            "image is gone; build again"
        )
    return images


def check_entrypoint(entrypoint: str, binary: str, site: Path, platform: str = "") -> None:
    """Fail like the zipapp builder (exit 2) when `module:attr` is not in `site`
    (`shipyard.entrypoints`: read from the files, never imported)."""
    from shipyard.entrypoints import entrypoint_problem

    problem = entrypoint_problem(entrypoint, [site], f"{binary}'s wheel or its dependencies")
    if problem:
        on = f" ({platform})" if platform else ""
        raise UsageError(
            f"entrypoint {entrypoint}: {problem}{on}; fix the entrypoint in binaries.yaml, "
            "or add the dependency that has it"
        )


def entry_script(entrypoint: str, site: str, *more: str) -> bytes:
    """The script that runs `module:function` with `site`, then `more`, first on sys.path."""
    module, _, attribute = entrypoint.partition(":")
    head, _, rest = attribute.partition(".")
    call = f"{head}.{rest}" if rest else head
    sites = [site, *more]
    return (
        "#!/usr/bin/env python3\n"
        f"# Runs {entrypoint}; generated by shipyard.\n"
        "import site\nimport sys\n\n"
        f"_SITES = {sites!r}\n"
        "sys.path[0:0] = _SITES\n"
        "for _folder in _SITES:\n"
        "    site.addsitedir(_folder)  # the .pth files of the installed distributions\n"
        f"from {module} import {head}\n\n"
        f"sys.exit({call}())\n"
    ).encode()


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _records(site: Path) -> dict[str, tuple[str, str]]:
    """Every RECORD row in `site`: site-relative path -> (distribution, recorded hash)."""
    rows: dict[str, tuple[str, str]] = {}
    for info in sorted(site.glob("*.dist-info")):
        name = _normal(info.name.removesuffix(".dist-info").rsplit("-", 1)[0])
        for member in info.iterdir():
            rows.setdefault(f"{info.name}/{member.name}", (name, ""))
        record = info / "RECORD"
        lines = record.read_text(encoding="utf-8").splitlines() if record.is_file() else []
        for row in csv.reader(lines):
            path = posixpath.normpath(row[0]) if row else ".."
            if not path.startswith(".."):
                rows[path] = (name, row[1] if len(row) > 1 else "")
    return rows


def split_site(site: Path, distribution: str) -> frozenset[str]:
    """The site-relative paths that belong to `distribution` (from its RECORD)."""
    wanted = _normal(distribution)
    return frozenset(path for path, (name, _) in _records(site).items() if name == wanted)


def _tree_key(entries: Sequence[Entry], recorded: Mapping[str, str]) -> str:
    """What makes two sites' layers equal: paths, kinds, x bits and contents.

    A file's content is known by the hash its RECORD gives, read only when there is none.
    """
    digest = hashlib.sha256()
    for e in entries:
        content = (
            e.link
            or recorded.get(e.path)
            or (sha256_file(e.source) if e.source else "")
            or (hashlib.sha256(e.data).hexdigest() if e.data is not None else "")
        )
        digest.update(f"{e.path}\0{e.kind}\0{e.executable}\0{content}\n".encode())
    return digest.hexdigest()


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


@dataclasses.dataclass(frozen=True)
class _Part:
    """One of shipyard's layers of one platform: its entries and what makes it equal."""

    entries: tuple[Entry, ...]
    epoch: int
    key: str


@dataclasses.dataclass(frozen=True)
class _Roles:
    """Where each distribution of a site goes: the binary's own prefix, and who is a library."""

    binary: str
    entrypoint: str
    own: str  # the binary's distribution, normalised
    libraries: frozenset[str]  # the libraries' distributions, normalised

    @property
    def app_site(self) -> str:
        return f"/opt/{self.binary}/site"

    @property
    def sites(self) -> tuple[str, ...]:
        """sys.path and PYTHONPATH: own, libraries (when there are), dependencies."""
        return (self.app_site, *((LIBS_SITE,) if self.libraries else ()), DEPS_SITE)


class ImageBuilder:
    """Builds a binary's multi-arch image: an OCI layout plus a docker-archive per platform."""

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
        """Resolve, assemble and write dist/images/<binary>/ and one tarball per platform."""
        settings = image_settings(action)
        binary = action.binaries[0]
        ctx.logs.mkdir(parents=True, exist_ok=True)
        log = action_log(ctx.dist, self.kind, action.binaries)
        log.write_bytes(b"")
        problems = {
            "no platforms": not action.platforms,
            "no base image (set image.base)": not settings.base,
            "image.dockerfile builds need the Docker engine, not this builder": bool(
                settings.dockerfile
            ),
            f"binary {binary} has no entrypoint (module:function)": not action.entrypoint,
        }
        try:
            own, libraries = _own_wheel(action, list(select(deps, kind="wheel")))
        except ShipyardError as exc:
            problems = {str(exc): True, **problems}
        missing = [reason for reason, bad in problems.items() if bad]
        if missing or settings.base is None:
            raise ShipyardError("; ".join(missing))
        roles = _Roles(
            binary,
            action.entrypoint,
            _normal(_wheel_name(own)),
            frozenset(_normal(_wheel_name(w)) for w in libraries),
        )
        plan = plan_variants(settings)
        store = blob_store(ctx.env)
        loaded: dict[str, dict[str, Base]] = {}
        for flavour in plan.flavours:  # each distinct base once
            if flavour.base not in loaded:
                loaded[flavour.base] = load_base(
                    flavour.base, action.platforms, root=ctx.root, store=store, env=ctx.env
                )
        ctx.dist.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=temp_prefix(), dir=ctx.dist) as tmp:
            env = build_env(ctx)
            requirements = requirements_for(action, ctx, Path(tmp))
            wheels = [own.path, *(w.path for w in libraries)]

            # One site per target Python the flavours need ("" is the image's own).
            pythons = list(dict.fromkeys(f.python for f in plan.flavours))

            def site(part: tuple[str, str]) -> Resolution:
                python, platform = part
                folder = platform.replace("/", "_")
                dest = Path(tmp) / (f"py{python}" if python else "") / folder
                # The repository's projects from their wheels only, before any layer.
                return from_repository(
                    self.resolver(
                        wheels,
                        platform,
                        python or ctx.python,
                        dest,
                        env=env,
                        log=log,
                        requirements=requirements,
                        extras=action.extras,
                    ),
                    wheels,
                    ctx.workspace,
                    action=action.id,
                    extras=action.extras,
                    log=log,
                )

            parts = [(py, p) for py in pythons for p in action.platforms]
            resolved = map_parts(ctx, site, parts)
            for resolution in resolved:  # before any layer is written
                check_entrypoint(action.entrypoint, binary, resolution.site, resolution.platform)
            by_python = {
                py: resolved[i * len(action.platforms) : (i + 1) * len(action.platforms)]
                for i, py in enumerate(pythons)
            }
            _check_native(action, plan, loaded, by_python, roles, store, settings)
            layers_of = {
                py: _layers(
                    action,
                    ctx,
                    {p: r.site for p, r in zip(action.platforms, rs, strict=True)},
                    roles,
                    store,
                    self.level,
                )
                for py, rs in by_python.items()
            }
            by_flavour = [
                _images(action, ctx, loaded[f.base], layers_of[f.python], roles, f)
                for f in plan.flavours
            ]
            raw_kept = key.inputs.get(KEPT)
            kept = [str(k) for k in raw_kept] if isinstance(raw_kept, list) else []
            layout = image_layout(ctx.dist, binary)
            others = _read_kept(layout, kept)
            identity = build_identity(key.inputs)
            # Read before the default layout (and the variants' folders in it) is replaced.
            kept_variants = {
                name: _kept_variant(layout, name, identity, action.platforms, kept)
                for name in plan.variants
                if not plan.collapsed(name)
            }
            if others:
                with log.open("a", encoding="utf-8") as out:
                    names = ", ".join(str(i.platform) for i in others)
                    out.write(f"kept {names} of the image in dist/ (built from the same inputs)\n")
            installed_of = {
                py: tuple(
                    Installed(
                        r.platform,
                        tuple(
                            Distribution(d.name, d.version, d.sha256, d.license, d.first_party)
                            for d in r.distributions
                        ),
                    )
                    for r in rs
                )
                for py, rs in by_python.items()
            }
            installed = installed_of[""]
            variants = {
                name: (
                    dict(zip(action.platforms, by_flavour[i], strict=True)),
                    kept_variants.get(name, others),
                    plan.collapsed(name),
                )
                for name, i in plan.chosen
                if name != DEFAULT
            }
            return write_images(
                binary,
                ctx,
                dict(zip(action.platforms, by_flavour[0], strict=True)),
                installed,
                kept=others,
                notes={BUILD_NOTE: identity},
                variants=variants,
                variant_installed={
                    name: installed_of[plan.flavours[i].python]
                    for name, i in plan.chosen
                    if plan.flavours[i].python
                },
            )


def _check_native(
    action: Action,
    plan: VariantPlan,
    loaded: Mapping[str, Mapping[str, Base]],
    by_python: Mapping[str, Sequence[Resolution]],
    roles: _Roles,
    store: BlobStore,
    settings: ImageSettings,
) -> None:
    """Refuse (exit 1) an image whose native code needs a library that neither its base
    nor its own files provide, for any platform and flavour, naming each library, the
    file that needs it and its distribution; `image.allow_missing_libraries` accepts."""
    from shipyard.builders.image.native import base_libraries, missing_libraries

    accept = settings.allow_missing_libraries
    own = {roles.own}

    def image_path(rel: str, owner: str) -> str:
        name = _normal(owner.partition(" ")[0])
        site = (
            roles.app_site if name in own else LIBS_SITE if name in roles.libraries else DEPS_SITE
        )
        return f"{site}/{rel}"

    lines: list[str] = []
    seen: set[tuple[str, str, str]] = set()
    for flavour in plan.flavours:
        for platform, resolution in zip(action.platforms, by_python[flavour.python], strict=True):
            base = loaded[flavour.base][platform]
            have = base_libraries(base.image.layers, store)
            for gap in missing_libraries(resolution, have, accept=accept, image_path=image_path):
                if (gap.library, gap.needed_by, flavour.base) in seen:
                    continue
                seen.add((gap.library, gap.needed_by, flavour.base))
                lines.append(
                    f"{gap.library}, needed by {gap.needed_by} ({gap.distribution}), is not in "
                    f"base {base.name} ({platform}) nor in the image"
                )
    if lines:
        names = sorted({line.split(",", 1)[0] for line in lines})
        raise ShipyardError(
            "native libraries missing:\n  "
            + "\n  ".join(lines)
            + "\n  use a base that has them (manylinux wheels expect libstdc++, libgcc_s and "
            "glibc's libraries; Debian: apt-get install libstdc++6), or accept them with "
            f"image.allow_missing_libraries: [{', '.join(names)}]"
        )


def _kept_variant(
    layout: Path, name: str, identity: str, platforms: Sequence[str], kept: Sequence[str]
) -> list[Image]:
    """The images of variant `name` a subset build keeps: the same platforms the default
    keeps (`kept`), from the variant's layout built from the same inputs."""
    if not kept:
        return []
    folder = variant_layout(layout, name)
    found = kept_platforms(folder, identity, platforms)
    wanted = sorted(text.partition("@")[0] for text in kept)
    if sorted(p for p, _ in found) != wanted:
        raise ShipyardError(
            f"{folder}: the {name} variant lacks the {', '.join(wanted)} image(s) the default "
            "keeps (its folder changed since it was built); build every platform"
        )
    return _read_kept(folder, [f"{p}@{d}" for p, d in found])


def _notes(action: Action, ctx: BuildContext) -> dict[str, str]:
    notes = {
        _OCI + "created": ctx.stamp.created,
        _OCI + "version": ctx.stamp.version,
        _OCI + "source": source_url(action, ctx),
        _OCI + "title": action.binaries[0],
    }
    if ctx.stamp.revision:
        notes[_OCI + "revision"] = ctx.stamp.revision
    return notes


def _split(site: Path, roles: _Roles, epoch: int, version: str) -> list[tuple[str, _Part]]:
    """A site's shipyard layers, lowest first: (history line, part); empty ones left out.

    Each file goes where the distribution whose RECORD lists it goes; a file no
    RECORD lists goes with the third-party dependencies.
    """
    records = _records(site)
    hashes = {p: h for p, (_, h) in records.items() if h}
    groups: dict[str, list[Entry]] = {"deps": [], "libs": [], "app": []}
    for entry in scan_tree(site):
        owner = records.get(entry.path, ("", ""))[0]
        role = "app" if owner == roles.own else "libs" if owner in roles.libraries else "deps"
        groups[role].append(entry)
    script = Entry(
        f"opt/{roles.binary}/bin/{roles.binary}",
        data=entry_script(roles.entrypoint, *roles.sites),
        executable=True,
    )
    plan = (
        ("deps", DEPS_SITE, SHARED_EPOCH, "shipyard: third-party dependencies", ()),
        ("libs", LIBS_SITE, SHARED_EPOCH, "shipyard: in-repo libraries", ()),
        ("app", roles.app_site, epoch, f"shipyard: {roles.binary} {version}", (script,)),
    )
    parts = []
    for role, prefix, when, created_by, extra in plan:
        if not groups[role] and not extra:
            continue
        key = f"{prefix}\0{when}\0{_tree_key(groups[role], hashes)}\0{_tree_key(extra, {})}"
        entries = tuple(dataclasses.replace(e, path=f"{prefix[1:]}/{e.path}") for e in groups[role])
        parts.append((created_by, _Part((*entries, *extra), when, key)))
    return parts


Layered = dict[str, list[tuple[str, Layer]]]  # platform -> (history line, layer), lowest first


def _layers(
    action: Action,
    ctx: BuildContext,
    sites: Mapping[str, Path],
    roles: _Roles,
    store: BlobStore,
    level: int,
) -> Layered:
    """shipyard's layers of each platform; layers equal between platforms written once.

    Every variant of the image gets these very layers: only its base and config differ.
    """
    stamp = ctx.stamp
    plans = {p: _split(site, roles, stamp.epoch, stamp.version) for p, site in sites.items()}
    unique = {part.key: part for plan in plans.values() for _, part in plan}

    def layer(part: _Part) -> Layer:
        return write_layer(part.entries, store, part.epoch, level=level)

    made = dict(zip(unique, map_parts(ctx, layer, list(unique.values())), strict=True))
    return {
        platform: [(created_by, made[part.key]) for created_by, part in plan]
        for platform, plan in plans.items()
    }


def _images(
    action: Action,
    ctx: BuildContext,
    bases: Mapping[str, Base],
    layers: Layered,
    roles: _Roles,
    flavour: Flavour,
) -> list[Image]:
    """One image per platform: `bases`' image, then `layers`, then the config with
    `flavour`'s env."""
    notes = _notes(action, ctx)
    images = []
    for platform in action.platforms:
        base = bases[platform]
        image = dataclasses.replace(base.image, created=ctx.stamp.created)
        for created_by, made in layers[platform]:
            image = append_layer(image, made, created_by=created_by)
        image = _configure(image, action, roles, notes, flavour.env_map)
        base_notes = {_OCI + "base.name": base.name} | (
            {_OCI + "base.digest": base.digest} if base.digest else {}
        )
        images.append(dataclasses.replace(image, annotations=as_annotations(notes | base_notes)))
    return images


def _configure(
    image: Image,
    action: Action,
    roles: _Roles,
    notes: dict[str, str],
    extra_env: Mapping[str, str],
) -> Image:
    settings = image_settings(action)
    binary = action.binaries[0]
    env = dict(line.partition("=")[::2] for line in image.config.env)
    env["PATH"] = f"{env.get('PATH') or DEFAULT_PATH}:/opt/{binary}/bin"
    env["PYTHONPATH"] = ":".join(roles.sites)
    env.update(extra_env)  # the image's env, with a variant's merged over it
    labels = dict(image.config.labels) | notes | dict(settings.labels)
    return with_config(
        image,
        env=tuple(f"{k}={v}" for k, v in env.items()),
        entrypoint=(f"/opt/{binary}/bin/{binary}",),
        cmd=None,
        user=settings.user or image.config.user,
        working_dir=settings.workdir or image.config.working_dir,
        labels=labels,
    )


VariantImages = tuple[Mapping[str, Image], Sequence[Image], bool]
"""A variant's images by platform, the images it keeps, and whether it is the default."""


def write_images(
    binary: str,
    ctx: BuildContext,
    images: Mapping[str, Image],
    installed: tuple[Installed, ...] | None,
    *,
    kept: Sequence[Image] = (),
    notes: Mapping[str, str] | None = None,
    variants: Mapping[str, VariantImages] | None = None,
    variant_installed: Mapping[str, tuple[Installed, ...]] | None = None,
) -> tuple[Artifact, ...]:
    """Write the index of `images` as dist/images/<binary>/ and one tarball per platform.

    The index also lists `kept`, other platforms' images already in the layout
    (no tarball is written for them). `notes` go on the layout's index.json entry,
    not into the index: what the local copy was built from is never pushed. The
    layout's index.json is the `image` artifact, with the index digest, the
    per-platform manifests and `installed` (None: not known) as its metadata; the
    layout's other files are `image-layout` artifacts, the tarballs `image-archive`
    ones (tagged `archive_tags`, distinct per platform).

    Each of `variants` is written the same way into `variants/<name>/` of that
    folder, its tarballs named and tagged with the version suffixed `-<name>`; a
    variant that is the default gets the default's index and no tarballs of its
    own. The folder with every variant is built aside and renamed into place at
    once (the kept images' blobs are read from the folder it replaces). The
    default's artifacts come first. A variant resolved for another Python has its
    own `variant_installed` (by name); the others share `installed`.
    """
    mine_of = dict(variant_installed or {})
    layout = image_layout(ctx.dist, binary)
    layout.parent.mkdir(parents=True, exist_ok=True)
    aside = Path(tempfile.mkdtemp(prefix=f"{temp_prefix()}{binary}.", dir=layout.parent))
    every = {DEFAULT: (images, kept, False), **(variants or {})}
    tops: dict[str, tuple[Descriptor, Index]] = {}
    try:
        for name, (their, their_kept, _) in every.items():
            first = dict(next(iter(their.values())).annotations)
            index_notes = {k: v for k, v in first.items() if not k.startswith(_OCI + "base.")}
            index = make_index([*their.values(), *their_kept], index_notes)
            folder = variant_layout(aside / binary, name)
            ref = ctx.stamp.tag + _suffix(name)
            tops[name] = (write_layout(folder, index, ref=ref, notes=notes), index)
        replace_dir(aside / binary, layout)
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    outputs: list[Artifact] = []
    jobs: list[tuple[str, str]] = []  # (variant, platform) of each tarball
    for name, (their, _, same) in sorted(every.items()):
        top, index = tops[name]
        outputs += _layout_artifacts(
            binary, variant_layout(layout, name), top, index, mine_of.get(name, installed)
        )
        jobs += [] if same else [(name, platform) for platform in their]

    def archive(job: tuple[str, str]) -> Artifact:
        name, platform = job
        tarball = image_archive(ctx.dist, binary, ctx.stamp.version + _suffix(name), platform)
        tags = archive_tags(binary, ctx.stamp.tag + _suffix(name), platform)
        sha256 = write_docker_archive(tarball, every[name][0][platform], tags, ctx.stamp.epoch)
        theirs = mine_of.get(name, installed)
        mine = tuple(i for i in theirs or () if i.platform == platform)
        return Artifact(
            "image-archive",
            binary,
            platform,
            tarball,
            sha256,
            tarball.stat().st_size,
            Metadata(installed=mine if theirs is not None else None),
        )

    outputs.extend(map_parts(ctx, archive, jobs))
    return tuple(outputs)


def _suffix(variant: str) -> str:
    return f"-{variant}" if variant else ""


def _layout_artifacts(
    binary: str,
    layout: Path,
    top: Descriptor,
    index: Index,
    installed: tuple[Installed, ...] | None,
) -> list[Artifact]:
    """The layout's index.json as the `image` artifact, then its other files (not those
    of the variants' layouts inside it) as `image-layout` ones."""
    manifests = tuple(
        PlatformManifest(str(d.platform), d.digest, d.size)
        for d in (manifest_descriptor(image) for image in index.images)
    )
    about = ImageIndex(top.digest, top.media_type, top.size, manifests)
    nested = layout / VARIANTS_DIR
    files = sorted(
        (p for p in layout.rglob("*") if p.is_file() and not p.is_relative_to(nested)),
        key=lambda p: (p.parent != layout, p),
    )
    return [
        _artifact(p, binary, Metadata(installed=installed, image=about))
        if p.name == "index.json" and p.parent == layout
        else _artifact(p, binary, None)
        for p in files
    ]  # index.json and oci-layout first, then blobs


def _artifact(path: Path, binary: str, metadata: Metadata | None) -> Artifact:
    # Blobs are named by their sha256: no need to read them again.
    named = path.parent.name == "sha256" and len(path.name) == 64
    sha256 = path.name if named else sha256_file(path)
    kind = "image" if metadata is not None else "image-layout"
    return Artifact(kind, binary, ANY, path, sha256, path.stat().st_size, metadata or Metadata())
