"""Dependency resolution for a target platform: a wheel and its requirements, installed flat.

Zipapps and images both start here. Nothing is built or run for the target: native
wheels come prebuilt for it, so an arm64 site-packages is made on an amd64 host by
asking the installer for that platform's wheels only (`shipyard.builders.installer`:
uv, else pip). What was installed is read back from the site
(`shipyard.builders.distributions`), each distribution with its wheel's hash.
"""

from __future__ import annotations

import hashlib
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from shipyard import artifacts
from shipyard._fs import TEMP_PREFIX, sha256_file
from shipyard.artifacts import Installed
from shipyard.builders.distributions import (
    Distribution,
    read_site,
    reported_hashes,
    scrub,
    with_hashes,
)
from shipyard.builders.installer import (
    PLATFORM_ARCH,
    install_command,
    interpreter_used,
    locked_hashes,
    target_env,
)
from shipyard.builders.site_memo import SiteMemo, site_key
from shipyard.errors import BuildError
from shipyard.process import installer_env, run_logged, uv_binary

__all__ = ["SITES", "Locked", "Resolution", "resolve"]

_NO_WHEEL = (
    re.compile(r"Because (?P<name>[A-Za-z0-9._-]+)\S* has no (?:usable )?wheels"),
    re.compile(r"Because all versions of (?P<name>[A-Za-z0-9._-]+) have no (?:usable )?wheels"),
    re.compile(r"Because (?P<name>[A-Za-z0-9._-]+)\S* (?:only has|has only) source"),
    re.compile(r"No matching distribution found for (?P<name>[A-Za-z0-9._-]+)"),
)


@dataclass(frozen=True)
class Locked:
    """What a binary installs from a lock: the hash-pinned requirements `file`; with
    `exact` (uv.lock's slice, complete) nothing is resolved again, so the install is
    the lock's, as `uv sync --frozen` makes it; `built` are wheels made from locked
    sdists (see shipyard.builders.sdists), installed beside it."""

    file: Path
    exact: bool = False
    built: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Resolution:
    """A site-packages folder for one platform and what was installed into it."""

    platform: str
    site: Path
    distributions: tuple[Distribution, ...]
    pure: bool

    def installed(self) -> Installed:
        """What the site holds, as an artifact's metadata records it."""
        return Installed(
            self.platform,
            tuple(
                artifacts.Distribution(d.name, d.version, d.sha256, d.license, d.first_party)
                for d in self.distributions
            ),
        )


def _named(wheel: Path, extras: Sequence[str]) -> str:
    """`name[extra,...] @ file:///...`: a wheel file as a requirement with extras."""
    name = wheel.name.split("-", 1)[0]
    chosen = f"[{','.join(extras)}]" if extras else ""
    return f"{name}{chosen} @ {wheel.resolve().as_uri()}"


def _wheel_requirements(
    wheels: Sequence[Path], folder: Path, extras: Sequence[str] = (), built: Sequence[Path] = ()
) -> Path:
    """A requirements file naming each wheel by path and hash, for --require-hashes mode;
    the first (the binary's own) with `extras`; then the wheels `built` from sdists."""
    lines = []
    for index, wheel in enumerate([*wheels, *built]):
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        lines.append(f"{_named(wheel, extras if index == 0 else ())} --hash=sha256:{digest}\n")
    path = folder / "wheels.txt"
    path.write_text("".join(lines))
    return path


def _output(log: Path, start: int) -> str:
    """This install's output: the `log` from `start` on, when the log is shared."""
    with log.open("rb") as handle:
        handle.seek(start)
        return handle.read().decode(errors="replace")


def _failure(log: Path, start: int, platform: str, python: str) -> str:
    text = _output(log, start)
    for pattern in _NO_WHEEL:
        match = pattern.search(text)
        if match:
            return (
                f"no wheel of {match['name']} for {platform} (CPython {python}); pin a version "
                f"that publishes one, or remove {platform} from the binary's platforms"
            )
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.lower().startswith(("error", "cause"))]
    return "installing for " + platform + " failed: " + (errors or lines or ["no output"])[-1]


def resolve(
    wheels: Path | Sequence[Path],
    platform: str,
    python: str,
    dest: Path,
    *,
    env: Mapping[str, str],
    log: Path,
    requirements: Path | Locked | None = None,
    extras: Sequence[str] = (),
) -> Resolution:
    """Install `wheels` and their dependencies for `platform` into the folder `dest`.

    The first wheel is the binary's own; the others are the in-repository libraries
    it needs, installed from those files and never from an index copy of the same
    name. Only binary wheels are accepted, so nothing is compiled for the wrong
    machine. With `requirements` (a lock file with hashes) every download is
    checked against it and a dependency missing from it fails the install; a `Locked`
    that is `exact` is installed as it is, without resolving again (the in-repo wheels'
    own bounds on each other are not enforced, as uv does for workspace members).
    `extras` are the first wheel's extras, installed with it.
    """
    wheels = [wheels] if isinstance(wheels, Path) else list(wheels)
    if platform not in PLATFORM_ARCH:
        raise BuildError(f"resolve:{platform}", f"unknown platform {platform}")
    log.parent.mkdir(parents=True, exist_ok=True)
    key = site_key(wheels, platform, python, _lock_key(requirements), extras, _keyed_env(env))
    resolution, looked_up = SITES.site(
        key,
        dest,
        lambda: _resolve(wheels, platform, python, dest, env, log, requirements, extras),
    )
    if looked_up:
        with log.open("a", encoding="utf-8") as handle:
            handle.write(
                f"{platform}: the site another output of this binary resolved (the same "
                "wheels, lock, Python and installer settings), not resolved again\n"
            )
    return resolution


SITES = SiteMemo()
"""The sites resolved in this process (`shipyard.builders.site_memo`): a binary's zipapp
and image resolve each platform once."""


def _lock_key(requirements: Path | Locked | None) -> dict[str, object] | None:
    """What of the lock decides the site: its bytes, exactness and the built wheels'."""
    if requirements is None:
        return None
    locked = requirements if isinstance(requirements, Locked) else Locked(requirements)
    return {
        "file": sha256_file(locked.file),
        "exact": locked.exact,
        "built": sorted(sha256_file(path) for path in locked.built),
    }


def _keyed_env(env: Mapping[str, str]) -> dict[str, str]:
    """What the installer sees of `env`, and which installer it is."""
    return {**installer_env(env), " installer": uv_binary() or sys.executable}


def _resolve(
    wheels: list[Path],
    platform: str,
    python: str,
    dest: Path,
    env: Mapping[str, str],
    log: Path,
    requirements: Path | Locked | None,
    extras: Sequence[str],
) -> Resolution:
    """`resolve` without the memo: run the installer into `dest`, read the site back."""
    locked = requirements if isinstance(requirements, Locked) else None
    if isinstance(requirements, Locked):
        requirements = requirements.file
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=TEMP_PREFIX + "resolve-", dir=dest.parent) as tmp:
        reqs = _requirements(wheels, requirements, locked, extras, Path(tmp))
        report = Path(tmp) / "report.json"
        command = install_command(platform, python, dest, reqs, report)
        start, returncode = _install(command, log, env, platform)
        reported = reported_hashes(report) if report.is_file() else None
    if returncode != 0:
        action = f"resolve:{wheels[0].name}:{platform}"
        raise BuildError(action, _failure(log, start, platform, python), command=command, log=log)
    scrub(dest)
    built = locked.built if locked else ()
    used = None if reported is not None else interpreter_used(_output(log, start))
    dists = _hashed(read_site(dest), wheels, built, reported, platform, python, env, used)
    unknown = sorted(d.name for d in dists if d.sha256 is None)
    if unknown:
        with log.open("a", encoding="utf-8") as handle:
            handle.write(f"no wheel hash known for {', '.join(unknown)} ({platform})\n")
    return Resolution(platform, dest, dists, all(d.pure for d in dists))


def _requirements(
    wheels: Sequence[Path],
    requirements: Path | None,
    locked: Locked | None,
    extras: Sequence[str],
    tmp: Path,
) -> list[str]:
    """What the installer is asked to install: the wheel files (the first with
    `extras`), or with a lock file its pins and the wheels by hash (`--no-deps` when
    the lock is exact)."""
    if requirements is None:
        reqs = [str(w) for w in wheels]
        if extras:
            reqs[0] = _named(wheels[0], extras)
        return reqs
    built = locked.built if locked else ()
    pinned = _wheel_requirements(wheels, tmp, extras, built)
    reqs = ["--require-hashes", "-r", str(requirements), "-r", str(pinned)]
    if locked and locked.exact:
        reqs.insert(0, "--no-deps")
    return reqs


def _install(
    command: list[str], log: Path, env: Mapping[str, str], platform: str
) -> tuple[int, int]:
    """Run the installer's `command`, its output appended to `log`: where this install's
    output starts in the log, and the exit status."""
    with log.open("ab") as handle:
        start = handle.tell()
        handle.write(f"$ {' '.join(command)}\n".encode())
    # Never the repository's folder: nothing there is the installer's to read.
    returncode = run_logged(
        command,
        log,
        env={**installer_env(env), **target_env(platform), "PYTHONHASHSEED": "0"},
        cwd=Path(tempfile.gettempdir()),
    )
    return start, returncode


def _hashed(
    dists: Sequence[Distribution],
    wheels: Sequence[Path],
    built: Sequence[Path],
    reported: dict[str, str] | None,
    platform: str,
    python: str,
    env: Mapping[str, str],
    interpreter: str | None,
) -> tuple[Distribution, ...]:
    """`dists` with their wheel's sha256: the given `wheels` and those `built` from
    sdists by file, the others from pip's report (`reported`) or, with uv, from the
    lock uv makes of the same pins for `platform` and `python` (with the `interpreter`
    the install used)."""
    names = set()
    for path in [*wheels, *built]:
        try:
            names.add(parse_wheel_filename(path.name)[0])
        except InvalidWheelFilename:
            continue
    others = [d for d in dists if canonicalize_name(d.name) not in names]
    if reported is None:  # uv: the same pins, locked, name each wheel with its hash
        reported = locked_hashes(others, platform, python, env, interpreter)
    for path in built:  # built here from a locked sdist
        reported.setdefault(str(parse_wheel_filename(path.name)[0]), sha256_file(path))
    return with_hashes(dists, wheels, reported)
