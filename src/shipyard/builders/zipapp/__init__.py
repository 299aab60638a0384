"""Zipapps: one self-contained, reproducible .pyz per binary, universal or per platform.

The archive is a shebang line and a zip: the bootstrap as __main__.py, the build info,
and the site-packages resolved for the target under site/. The bootstrap unpacks the
site once per build into the user's cache and runs it from disk, as from a virtualenv.

With several target Pythons (project.python a list) the site is resolved for each
Python and platform: one archive runs on every one of them when all got the same
pure distributions, else each Python gets its own (`-py3.12`), universal or per
platform as above (`targets`). The bootstrap accepts exactly the Pythons its
archive was built for. What an archive holds and how it is written is `archive`;
the launcher shipped beside a Windows zipapp is `launcher`.

There used to be a second mode that imported pure code straight from the archive. It
was removed: its cold start was no faster (httpie: 600 ms either way), its warm start
1.7x slower (332 ms against 195 ms), and it broke httpie, yamllint and pytest, 3 of
the 10 applications of the compatibility corpus.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard import __version__
from shipyard.artifacts import ANY, Artifact, Installed, Metadata
from shipyard.builders.kinds import check_entrypoint, own_wheels, stamp_inputs, wheel_digests
from shipyard.builders.locks import lock_inputs, requirements_for
from shipyard.builders.wheel import build_env, build_info
from shipyard.builders.zipapp.archive import (
    DEFAULT_SHEBANG,
    Entry,
    boot_digest,
    layout,
    write_archive,
    zipapp_info,
)
from shipyard.builders.zipapp.launcher import launcher, launcher_name
from shipyard.builders.zipapp.targets import Archive, archive_file, plan_archives, pythons_of
from shipyard.dist import action_log, platform_log, temp_prefix
from shipyard.engine.context import BuildContext, map_parts
from shipyard.engine.keys import ActionKey, Inputs
from shipyard.engine.plan import Action
from shipyard.errors import ShipyardError

if TYPE_CHECKING:
    from shipyard.builders.resolve import Resolution

__all__ = [
    "DEFAULT_SHEBANG",
    "Entry",
    "ZipappBuilder",
    "ZipappOptions",
    "archive_file",
    "launcher",
    "launcher_name",
    "layout",
    "options_for",
    "pythons_of",
    "write_archive",
    "zipapp_info",
]


@dataclass(frozen=True)
class ZipappOptions:
    """How one binary's zipapp is made: its entry point and the manifest's zipapp settings."""

    entrypoint: str
    shebang: str = DEFAULT_SHEBANG
    compress: bool = True
    compile: bool = False


def options_for(action: Action) -> ZipappOptions:
    """The options an action carries: `entrypoint` and `zipapp` settings (its lock is
    the action's, see `shipyard.builders.locks`)."""
    # Read with defaults, so this works before and after Action grows these fields.
    settings = getattr(action, "zipapp", None)
    return ZipappOptions(
        entrypoint=str(getattr(action, "entrypoint", "")),
        shebang=str(getattr(settings, "shebang", DEFAULT_SHEBANG)),
        compress=bool(getattr(settings, "compress", True)),
        compile=bool(getattr(settings, "compile", False)),
    )


def _check(action: Action, ctx: BuildContext, opts: ZipappOptions) -> None:
    binary, running = action.binaries[0], "{}.{}".format(*sys.version_info[:2])
    if not action.platforms:
        problem = f"binary {binary} has no platforms to build for"
    elif not opts.entrypoint:
        problem = f"binary {binary} has no entrypoint (module:function)"
    elif opts.compile and len(pythons_of(action, ctx)) > 1:
        problem = (
            f"zipapp.compile ships bytecode for one Python; project.python lists "
            f"{', '.join(pythons_of(action, ctx))}: set compile: false"
        )
    elif opts.compile and running != ctx.python:
        problem = f"zipapp.compile needs shipyard on Python {ctx.python}, the target: not {running}"
    else:
        return
    raise ShipyardError(problem)


class ZipappBuilder:
    """Builds a binary's zipapp(s) from the wheel of its source."""

    kind = "zipapp"

    def __init__(self, options: Callable[[Action], ZipappOptions] = options_for) -> None:
        self._options = options

    def inputs(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Inputs:
        """The wheel, platforms, options, lock file, target Python, stamp and bootstrap."""
        opts = self._options(action)
        return {
            "shipyard": __version__,
            "boot": boot_digest(),
            "wheels": wheel_digests(deps),
            "platforms": list(action.platforms),
            "entrypoint": opts.entrypoint,
            "shebang": opts.shebang,
            "compress": opts.compress,
            "compile": opts.compile,
            "extras": list(action.extras),
            # The lock's bytes that concern this binary, not its path.
            "lock": lock_inputs(action, ctx),
            # One target Python as a string (the keys of single-Python builds stay as
            # they were), several as a list: resolved for each, named in each archive.
            "python": _key_pythons(pythons_of(action, ctx)),
            "stamp": stamp_inputs(ctx),
        }

    def build(
        self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], key: ActionKey
    ) -> tuple[Artifact, ...]:
        """Resolve for every platform, then write one universal or one per-platform archive."""
        opts = self._options(action)
        wheels = [w.path for w in own_wheels(action, deps)]
        _check(action, ctx, opts)
        binary = action.binaries[0]
        pythons = pythons_of(action, ctx)
        # One resolution per (Python, platform); the Python is named only when there
        # are several, so a single-Python build keeps its logs and folders.
        names = {
            (python, platform): f"{platform}/py{python}" if len(pythons) > 1 else platform
            for python in pythons
            for platform in action.platforms
        }
        logs = {part: platform_log(ctx.dist, self.kind, binary, n) for part, n in names.items()}
        log = action_log(ctx.dist, self.kind, action.binaries)
        ctx.logs.mkdir(parents=True, exist_ok=True)
        ctx.dist.mkdir(parents=True, exist_ok=True)
        for path in (*logs.values(), log):
            path.write_bytes(b"")
        with tempfile.TemporaryDirectory(prefix=temp_prefix("zipapp"), dir=ctx.dist) as tmp:
            resolutions = _resolve(action, ctx, wheels, names, logs, Path(tmp))
            archives = plan_archives(pythons, action.platforms, resolutions)
            outputs = tuple(
                map_parts(
                    ctx,
                    lambda archive: self._write(action, ctx, opts, archive, Path(tmp)),
                    archives,
                )
            )
        log.write_bytes(b"".join(path.read_bytes() for path in logs.values()))
        return outputs

    def _write(
        self,
        action: Action,
        ctx: BuildContext,
        opts: ZipappOptions,
        archive: Archive,
        tmp: Path,
    ) -> Artifact:
        """Write `archive` into dist/ (through `tmp`) once its site holds the entry point."""
        binary = action.binaries[0]
        resolution = archive.resolution
        check_entrypoint(opts.entrypoint, binary, resolution.site, resolution.platform)
        info = _info(action, ctx, opts, archive)
        entries = layout(resolution.site, info, compile_pyc=opts.compile)
        target = archive_file(
            ctx.dist,
            binary,
            ctx.stamp.version,
            archive.named,
            None if archive.universal else resolution.platform,
        )
        # Written next to the output (tmp is in dist/), made executable, then renamed:
        # the .pyz appears whole, with its final mode, or not at all.
        temp = tmp / target.name
        epoch = ctx.stamp.epoch
        with _threads(ctx) as threads, _removing(resolution.site, tmp):
            digest = write_archive(
                temp, opts.shebang, entries, epoch, compress=opts.compress, threads=threads
            )
        temp.chmod(0o755)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(temp, target)
        installed: dict[str, Installed] = {}
        for r in archive.covered:  # per platform: the same for every Python it covers
            installed.setdefault(r.platform, r.installed())
        return Artifact(
            "zipapp",
            binary,
            str(info["platform"]),
            target,
            digest,
            target.stat().st_size,
            Metadata(installed=tuple(installed.values())),
        )


@contextmanager
def _threads(ctx: BuildContext) -> Iterator[int]:
    """How many threads may deflate an archive's entries: the action's own slot and the
    idle ones (zlib releases the GIL), at most one per core."""
    spare = (os.cpu_count() or 1) - 1
    if ctx.slots is None:
        yield 1 + spare
        return
    with ctx.slots.borrow(spare) as extra:
        yield 1 + extra


@contextmanager
def _removing(site: Path, tmp: Path) -> Iterator[None]:
    """Remove `site`, a folder of the build's `tmp`, in the background for the length
    of the block, done at its end.

    Its files are read by then (`layout`), and removing a site of a thousand files
    can take as long as deflating them: this runs while the archive is written."""
    if not site.is_relative_to(tmp):
        yield
        return
    remover = threading.Thread(target=shutil.rmtree, args=(site,), kwargs={"ignore_errors": True})
    remover.start()
    try:
        yield
    finally:
        remover.join()


def _resolve(
    action: Action,
    ctx: BuildContext,
    wheels: Sequence[Path],
    names: Mapping[tuple[str, str], str],
    logs: Mapping[tuple[str, str], Path],
    tmp: Path,
) -> list[Resolution]:
    """Each (Python, platform) of `names` resolved into its own folder of `tmp`, its
    output in its log. Installers are subprocesses and zlib releases the GIL: parts
    overlap when the job budget has idle slots. Each site is checked to hold the
    repository's projects from their wheels only, before anything is written."""
    # Imported here: the installers' modules are only needed to build, not to key.
    from shipyard.builders.origin import resolve_site
    from shipyard.builders.resolve import resolve

    requirements = requirements_for(action, ctx, tmp)
    return map_parts(
        ctx,
        lambda part: resolve_site(
            resolve,
            action,
            ctx,
            wheels,
            part,
            tmp / names[part].replace("/", "_"),
            env=build_env(ctx),
            log=logs[part],
            requirements=requirements,
        ),
        list(names),
    )


def _info(
    action: Action, ctx: BuildContext, opts: ZipappOptions, archive: Archive
) -> dict[str, object]:
    """The build info of `archive`, without what `layout` derives from its entries."""
    resolution = archive.resolution
    info: dict[str, object] = {
        "binary": action.binaries[0],
        **build_info(ctx.stamp),
        "python": archive.pythons[0],
        "platform": ANY if archive.universal else resolution.platform,
        "platforms": list(action.platforms if archive.universal else (resolution.platform,)),
        "entrypoint": opts.entrypoint,
        "distributions": {d.name: d.version for d in resolution.distributions},
        "shipyard": __version__,
    }
    every = pythons_of(action, ctx)
    if len(every) > 1:
        # What the bootstrap accepts, and what it can point a wrong Python to.
        info["pythons"] = list(archive.pythons)
        info["built_pythons"] = list(every)
        info["archive_python"] = archive.named
    return info


def _key_pythons(pythons: Sequence[str]) -> str | list[str]:
    return pythons[0] if len(pythons) == 1 else list(pythons)
