"""Zipapps: one self-contained, reproducible .pyz per binary, universal or per platform.

The archive is a shebang line and a zip: the bootstrap as __main__.py, the build info,
and the site-packages resolved for the target under site/. The bootstrap unpacks the
site once per build into the user's cache and runs it from disk, as from a virtualenv.

With several target Pythons (project.python a list) the site is resolved for each
Python and platform: one archive runs on every one of them when all got the same
pure distributions, else each Python gets its own (`-py3.12`), universal or per
platform as above (see `_archives`). The bootstrap accepts exactly the Pythons its
archive was built for.

There used to be a second mode that imported pure code straight from the archive. It
was removed: its cold start was no faster (httpie: 600 ms either way), its warm start
1.7x slower (332 ms against 195 ms), and it broke httpie, yamllint and pytest, 3 of
the 10 applications of the compatibility corpus.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import pkgutil
import stat
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib.util import MAGIC_NUMBER, source_hash
from pathlib import Path
from types import CodeType
from typing import TYPE_CHECKING

from shipyard import __version__
from shipyard._fs import sha256_file
from shipyard.artifacts import ANY, Artifact, Distribution, Installed, Metadata
from shipyard.builders.kinds import own_wheels, stamp_inputs, wheel_digests
from shipyard.builders.locks import lock_inputs, requirements_for
from shipyard.builders.wheel import build_env, build_info
from shipyard.builders.zipapp import _boot as boot
from shipyard.dist import action_log, platform_log, temp_prefix, zipapp_file
from shipyard.engine.context import BuildContext, map_parts
from shipyard.engine.keys import ActionKey, Inputs
from shipyard.engine.plan import Action
from shipyard.errors import ShipyardError, UsageError
from shipyard.stamp import ZIP_EPOCH

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

DEFAULT_SHEBANG = "/usr/bin/env python3"
# Deflate level 4: on black's site-packages half the time of level 6 for 4% more bytes.
_LEVEL = 4


@cache
def _boot_source() -> bytes:
    """The bootstrap's source, read as package data so it works from an archive too."""
    # pkgutil asks the package's loader, so this works from a zipapp too, and it
    # loads faster than importlib.resources (every no-op build hashes this file).
    data = pkgutil.get_data(__name__, "_boot.py")
    if data is None:
        raise ShipyardError(f"{__name__} has no _boot.py: a damaged installation")
    return data


# What a Windows launcher may name: a zipapp file name (binary names and PEP 440
# versions need no more), so nothing in it means anything to cmd.exe.
_LAUNCHABLE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-")


def zipapp_info(zipapp: Path) -> dict[str, object]:
    """The build info a shipyard zipapp carries (`_shipyard/build.json`); ShipyardError
    when `zipapp` is not one."""
    try:
        with zipfile.ZipFile(zipapp) as archive:
            info = json.loads(archive.read(boot.BUILD_INFO))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise ShipyardError(f"{zipapp} is not a shipyard zipapp: {exc}") from None
    if not isinstance(info, dict):
        raise ShipyardError(f"{zipapp} is not a shipyard zipapp: its build info is not a mapping")
    return info


def launcher_name(binary: str) -> str:
    """The Windows launcher's file name: `<binary>.cmd`."""
    return f"{binary}.cmd"


def launcher(pyz: str, python: str) -> bytes:
    """The `<binary>.cmd` shipped beside a Windows zipapp named `pyz`: Windows does not
    read shebang lines, so this runs the archive next to it with the py launcher, on
    the Python it was built for (`py -3.11`), passing every argument and the exit status.

    CRLF line endings, as cmd.exe expects. ShipyardError for a name cmd.exe could
    read as more than a file name.
    """
    if not pyz.endswith(".pyz") or not set(pyz) <= _LAUNCHABLE or pyz.startswith("-"):
        raise ShipyardError(f"{pyz!r} is not a zipapp file name a launcher can name")
    if not python.replace(".", "").isdigit():
        raise ShipyardError(f"{python!r} is not a Python version such as 3.11")
    return f'@py -{python} "%~dp0{pyz}" %*\r\n'.encode("ascii")


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


@dataclass(frozen=True)
class Entry:
    """One file of an archive: its name inside, its bytes and its mode (0644 or 0755)."""

    name: str
    data: bytes
    mode: int = 0o644


def write_archive(
    target: Path, shebang: str, entries: Sequence[Entry], epoch: int, *, compress: bool
) -> None:
    """Write a shebang line, then a zip of `entries` in name order.

    Every entry gets the same time (`epoch`, clamped to 1980) and a normalised mode,
    so the bytes depend only on the names, contents and options.
    """
    clock = time.gmtime(max(epoch, ZIP_EPOCH))
    stamp = (clock.tm_year, clock.tm_mon, clock.tm_mday, clock.tm_hour, clock.tm_min, clock.tm_sec)
    files = {e.name: e for e in entries}
    import zipfile  # here: a no-op build never writes an archive

    # No folder entries: the bootstrap makes the folders of the files it unpacks.
    with target.open("wb") as handle:
        handle.write(b"#!" + shebang.removeprefix("#!").strip().encode() + b"\n")
        with zipfile.ZipFile(handle, "w") as archive:
            for name in sorted(files):
                info = zipfile.ZipInfo(name, date_time=stamp)
                info.create_system = 3  # unix, so the mode bits are honoured
                info.external_attr = (0o100000 | files[name].mode) << 16
                info.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
                archive.writestr(info, files[name].data, compresslevel=_LEVEL if compress else None)


def _site_files(site: Path) -> dict[str, Path]:
    """The files of an installed site by relative name, in name order.

    Whatever an installer (or a hostile wheel) could leave that would smuggle
    something in is refused: a symlink out of the site, a pipe or device file, a
    name with a backslash or a ':' (a separator and a drive on Windows, which the
    bootstrap refuses to unpack on any system).
    A symlink to a file inside is read through; one to a folder is left out.
    """
    inside = site.resolve()
    files: dict[str, Path] = {}
    for folder, dirs, names in os.walk(site):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted([*names, *dirs]):
            path = Path(folder) / name
            rel = path.relative_to(site).as_posix()
            if "\\" in name:  # a folder separator to Windows unzip tools: '..\\..\\x' escapes
                raise ShipyardError(f"{path}: a backslash in a name; a zipapp holds plain names")
            if ":" in name:  # a drive to Windows: 'C:x' is not inside the site there
                raise ShipyardError(f"{path}: a ':' in a name; a zipapp holds plain names")
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                try:
                    real = path.resolve()
                except (OSError, RuntimeError):
                    raise ShipyardError(f"{path}: a symlink loop in the installed site") from None
                if not real.is_relative_to(inside):
                    raise ShipyardError(
                        f"{path}: a symlink to '{os.readlink(path)}' leaves the installed "
                        f"site {site}; a zipapp holds only what is inside it"
                    )
                if not path.is_file():
                    continue
            elif stat.S_ISDIR(mode):
                continue
            elif not stat.S_ISREG(mode):
                raise ShipyardError(f"{path}: not a regular file; a zipapp holds only files")
            if not name.endswith(".pyc") and not rel.startswith("bin/"):
                files[rel] = path
    return dict(sorted(files.items()))


def _importable(rel: str) -> bool:
    """Whether the file `rel` of a site is a module Python could import by name."""
    parts = rel.removesuffix(".py").split("/")
    return rel.endswith(".py") and all(p.isidentifier() for p in parts)


def _pyc(rel: str, data: bytes) -> bytes:
    code = compile(data, f"{boot.SITE}/{rel}", "exec", dont_inherit=True)
    # Unchecked hash-based (PEP 552): unpacking sets no meaningful timestamps, and an
    # unpacked build never changes, so Python need not read the source to trust it.
    return MAGIC_NUMBER + (1).to_bytes(4, "little") + source_hash(data) + _marshal(code)


def _marshal(code: CodeType) -> bytes:
    """Code as marshal format 2: formats 3+ mark shared objects by reference count,
    so their bytes depend on what else the process imported (not reproducible)."""
    return marshal.dumps(code, 2)


def _cached_pyc(rel: str) -> str:
    """Where Python looks for the bytecode of the module file `rel` (its __pycache__)."""
    folder, _, name = rel.rpartition("/")
    cached = f"__pycache__/{name[:-3]}.{sys.implementation.cache_tag}.pyc"
    return f"{folder}/{cached}" if folder else cached


def layout(site: Path, info: Mapping[str, object], *, compile_pyc: bool = False) -> list[Entry]:
    """Every entry of the archive of `site`: payload, bootstrap and build info.

    `info` is the build info without the keys derived here: native (whether the site
    holds compiled code), compiled and build_id (a hash of the rest). With
    `compile_pyc` the bytecode of every module is shipped in its __pycache__, where
    Python finds it once the site is unpacked.
    """
    files = _site_files(site)
    from shipyard.builders.distributions import NATIVE

    entries = [Entry("__main__.py", boot.MAIN.encode()), Entry(boot.SOURCE, _boot_source())]
    accepted = info.get("pythons") or [info.get("python")]
    if "{}.{}".format(*sys.version_info[:2]) in accepted:  # type: ignore[operator]
        code = compile(_boot_source(), boot.SOURCE, "exec", dont_inherit=True)
        entries.append(Entry(boot.CODE % MAGIC_NUMBER.hex(), _marshal(code)))
    for rel, path in files.items():
        data = path.read_bytes()
        executable = bool(NATIVE.search(rel)) or os.access(path, os.X_OK)
        entries.append(Entry(f"{boot.SITE}/{rel}", data, 0o755 if executable else 0o644))
        if compile_pyc and _importable(rel):
            entries.append(Entry(f"{boot.SITE}/{_cached_pyc(rel)}", _pyc(rel, data)))
    digest = hashlib.sha256()
    for entry in sorted(entries, key=lambda e: e.name):
        digest.update(f"{entry.name}\0{entry.mode:o}\0".encode())
        digest.update(hashlib.sha256(entry.data).digest())
    full = {
        **info,
        "native": any(NATIVE.search(rel) for rel in files),
        "compiled": compile_pyc,
        "build_id": digest.hexdigest(),
    }
    human = json.dumps(full, indent=2, sort_keys=True).encode() + b"\n"
    # Format 2 has no back-references, so equal values always marshal to equal bytes.
    return [*entries, Entry(boot.BUILD_INFO, human), Entry(boot.BOOT_DATA, marshal.dumps(full, 2))]


def pythons_of(action: Action, ctx: BuildContext) -> tuple[str, ...]:
    """The target Pythons a zipapp action resolves for: the action's, else the build's."""
    return action.pythons or (ctx.python,)


def archive_file(
    dist: Path, binary: str, version: str, python: str | None, platform: str | None
) -> Path:
    """Where a zipapp goes: `<binary>-<version>.pyz` (every platform, every Python),
    `<binary>-<version>-<os>_<arch>.pyz` (one platform), and with several target
    Pythons whose sites differ `<binary>-<version>-py3.12.pyz` (one Python, every
    platform) or `<binary>-<version>-py3.12-<os>_<arch>.pyz`."""
    return zipapp_file(dist, binary, f"{version}-py{python}" if python else version, platform)


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
            "boot": hashlib.sha256(_boot_source()).hexdigest(),
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
        several = len(pythons) > 1
        # One resolution per (Python, platform); the Python is named only when there
        # are several, so a single-Python build keeps its logs and folders.
        parts = [(python, platform) for python in pythons for platform in action.platforms]

        def part_name(part: tuple[str, str]) -> str:
            return f"{part[1]}/py{part[0]}" if several else part[1]

        logs = {part: platform_log(ctx.dist, self.kind, binary, part_name(part)) for part in parts}
        log = action_log(ctx.dist, self.kind, action.binaries)
        ctx.logs.mkdir(parents=True, exist_ok=True)
        ctx.dist.mkdir(parents=True, exist_ok=True)
        for path in (*logs.values(), log):
            path.write_bytes(b"")
        # Imported here: the installers' modules are only needed to build, not to key.
        from shipyard.builders.origin import from_repository
        from shipyard.builders.resolve import resolve

        with tempfile.TemporaryDirectory(prefix=temp_prefix("zipapp"), dir=ctx.dist) as tmp:
            requirements = requirements_for(action, ctx, Path(tmp))
            # Installers are subprocesses and zlib releases the GIL: parts overlap
            # when the job budget has idle slots. Each site is checked to hold the
            # repository's projects from their wheels only, before anything is written.
            resolutions = map_parts(
                ctx,
                lambda part: from_repository(
                    resolve(
                        wheels,
                        part[1],
                        part[0],
                        Path(tmp) / part_name(part).replace("/", "_"),
                        env=build_env(ctx),
                        log=logs[part],
                        requirements=requirements,
                        extras=action.extras,
                    ),
                    wheels,
                    ctx.workspace,
                    action=action.id,
                    extras=action.extras,
                    log=logs[part],
                ),
                parts,
            )
            archives = _archives(pythons, action.platforms, resolutions)
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
        archive: _Archive,
        tmp: Path,
    ) -> Artifact:
        binary = action.binaries[0]
        resolution = archive.resolution
        from shipyard.entrypoints import entrypoint_problem  # read when a zipapp is written

        problem = entrypoint_problem(
            opts.entrypoint, [resolution.site], f"{binary}'s wheel or its dependencies"
        )
        if problem:
            raise UsageError(
                f"entrypoint {opts.entrypoint}: {problem} ({resolution.platform}); fix the "
                "entrypoint in binaries.yaml, or add the dependency that has it"
            )
        info: dict[str, object] = {
            "binary": binary,
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
        write_archive(temp, opts.shebang, entries, ctx.stamp.epoch, compress=opts.compress)
        temp.chmod(0o755)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(temp, target)
        installed: dict[str, Installed] = {}
        for r in archive.covered:  # per platform: the same for every Python it covers
            installed.setdefault(
                r.platform,
                Installed(
                    r.platform,
                    tuple(
                        Distribution(d.name, d.version, d.sha256, d.license, d.first_party)
                        for d in r.distributions
                    ),
                ),
            )
        return Artifact(
            "zipapp",
            binary,
            str(info["platform"]),
            target,
            sha256_file(target),
            target.stat().st_size,
            Metadata(installed=tuple(installed.values())),
        )


def _key_pythons(pythons: Sequence[str]) -> str | list[str]:
    return pythons[0] if len(pythons) == 1 else list(pythons)


@dataclass(frozen=True)
class _Archive:
    """One archive to write: the resolution whose site it holds, every resolution it
    stands for, the Pythons it runs on, whether it is for every platform, and the
    Python its name carries (None: it runs on every target Python)."""

    resolution: Resolution
    covered: tuple[Resolution, ...]
    pythons: tuple[str, ...]
    universal: bool
    named: str | None


def _same_pure(resolutions: Sequence[Resolution]) -> bool:
    """Whether `resolutions` all got the same pure-Python distributions (a marker on a
    platform or a Python version may pull in different ones)."""
    return all(r.pure for r in resolutions) and len({r.distributions for r in resolutions}) == 1


def _archives(
    pythons: Sequence[str], platforms: Sequence[str], resolutions: Sequence[Resolution]
) -> list[_Archive]:
    """The archives of a build resolved for every (Python, platform), Pythons outer.

    One archive for everything when every resolution got the same pure
    distributions. Otherwise per Python (none is special): one archive for every
    platform when that Python's resolutions are the same and pure, else one per
    platform; named with the Python when there are several.
    """
    if _same_pure(resolutions):
        return [_Archive(resolutions[0], tuple(resolutions), tuple(pythons), True, None)]
    out: list[_Archive] = []
    width = len(platforms)
    for index, python in enumerate(pythons):
        mine = tuple(resolutions[index * width : (index + 1) * width])
        named = python if len(pythons) > 1 else None
        if _same_pure(mine):
            out.append(_Archive(mine[0], mine, (python,), True, named))
        else:
            out.extend(_Archive(r, (r,), (python,), False, named) for r in mine)
    return out
