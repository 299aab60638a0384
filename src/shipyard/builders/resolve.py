"""Dependency resolution for a target platform: a wheel and its requirements, installed flat.

Zipapps and images both start here. Nothing is built or run for the target: native
wheels come prebuilt for it, so an arm64 site-packages is made on an amd64 host by
asking the installer for that platform's wheels only (uv, else pip).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)

from shipyard import _toml
from shipyard._fs import TEMP_PREFIX, sha256_file
from shipyard.errors import BuildError
from shipyard.process import installer_env, run_logged, uv_binary

__all__ = [
    "MACOS",
    "NATIVE",
    "PLATFORM_ARCH",
    "Distribution",
    "Locked",
    "Resolution",
    "resolve",
    "target_env",
    "uv_binary",
]

# OCI platform -> the machine name in wheel platform tags.
PLATFORM_ARCH = {
    "linux/amd64": "x86_64",
    "linux/arm64": "aarch64",
    "linux/arm/v7": "armv7l",
    "linux/386": "i686",
    "linux/ppc64le": "ppc64le",
    "linux/s390x": "s390x",
    "linux/riscv64": "riscv64",
    "darwin/amd64": "x86_64",
    "darwin/arm64": "arm64",
    "windows/amd64": "amd64",
    "windows/arm64": "arm64",
}
# glibc 2.28 (manylinux_2_28) is what Debian 10+, RHEL 8+ and Ubuntu 18.10+ provide.
_GLIBC_MINOR = 28
# The oldest macOS a darwin zipapp runs on: 11 (Big Sur), the first with arm64. Wheels
# for it or older are taken, per-arch or universal2.
MACOS = (11, 0)
# The platforms uv can target; the rest go through pip's --platform.
_UV_PLATFORMS = {
    "linux/amd64": "x86_64-manylinux_2_28",
    "linux/arm64": "aarch64-manylinux_2_28",
    "darwin/amd64": "x86_64-apple-darwin",
    "darwin/arm64": "aarch64-apple-darwin",
    "windows/amd64": "x86_64-pc-windows-msvc",
    "windows/arm64": "aarch64-pc-windows-msvc",
}
# Files that name this machine or this moment, not the distribution: dropped for reproducibility.
_VOLATILE = frozenset({"direct_url.json", "uv_cache.json"})
# A file the dynamic loader maps: an extension module or a vendored shared library.
NATIVE = re.compile(r"\.(so|pyd|dylib)(\.[0-9.]+)?$")
_NO_WHEEL = (
    re.compile(r"Because (?P<name>[A-Za-z0-9._-]+)\S* has no (?:usable )?wheels"),
    re.compile(r"Because all versions of (?P<name>[A-Za-z0-9._-]+) have no (?:usable )?wheels"),
    re.compile(r"Because (?P<name>[A-Za-z0-9._-]+)\S* (?:only has|has only) source"),
    re.compile(r"No matching distribution found for (?P<name>[A-Za-z0-9._-]+)"),
)


@dataclass(frozen=True)
class Distribution:
    """One installed distribution; `pure` means no native code and a py3-none-any wheel.

    Beside what identifies it (and compares): `sha256`, the wheel file's digest
    (None when the installer's wheel is not known), `license` (License-Expression,
    else License, else the license classifiers joined with "; "), `first_party`:
    installed from one of the wheels `resolve` was given, and `tags`, the wheel tags
    its WHEEL file names.
    """

    name: str
    version: str
    pure: bool
    sha256: str | None = field(default=None, compare=False)
    license: str | None = field(default=None, compare=False)
    first_party: bool = field(default=False, compare=False)
    tags: frozenset[str] = field(default=frozenset(), compare=False, repr=False)


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


def _pip_platforms(platform: str) -> list[str]:
    """pip's --platform tags for `platform`, newest first."""
    os_name, arch = platform.partition("/")[0], PLATFORM_ARCH[platform]
    if os_name == "windows":
        return [f"win_{arch}"]
    if os_name == "darwin":
        # pip widens a macOS tag to every older macOS and to universal2 itself.
        return [f"macosx_{MACOS[0]}_{MACOS[1]}_{arch}"]
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(_GLIBC_MINOR, 16, -1)]
    legacy = {"x86_64": ("2014", "2010", "1"), "i686": ("2014", "2010", "1")}
    return tags + [f"manylinux{year}_{arch}" for year in legacy.get(arch, ("2014",))]


def target_env(platform: str) -> dict[str, str]:
    """What the installer's environment adds for `platform`: the oldest macOS to take
    wheels for (uv's default is newer than 11)."""
    if platform.startswith("darwin/"):
        return {"MACOSX_DEPLOYMENT_TARGET": f"{MACOS[0]}.{MACOS[1]}"}
    return {}


def _command(
    platform: str, python: str, dest: Path, reqs: list[str], report: Path | None = None
) -> list[str]:
    uv = uv_binary()
    if uv and platform in _UV_PLATFORMS:
        return [
            *(uv, "pip", "install", "--target", str(dest), "--no-progress"),
            *("--python-platform", _UV_PLATFORMS[platform], "--python-version", python),
            *("--only-binary", ":all:", *reqs),
        ]
    platforms = [f"--platform={tag}" for tag in _pip_platforms(platform)]
    return [
        *(sys.executable, "-m", "pip", "install", "--target", str(dest), "--no-compile"),
        *(*platforms, "--implementation", "cp", "--python-version", python),
        *("--only-binary=:all:", "--no-input", "--disable-pip-version-check"),
        *(("--report", str(report)) if report is not None else ()),
        *reqs,
    ]


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


def _headers(path: Path) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            break  # headers end at the first blank line; the long description follows
        key, sep, value = line.partition(":")
        if sep:
            found.append((key.strip().lower(), value.strip()))
    return found


_LICENSE_TEXT_MAX = 100  # a License header longer than this is the license's text, not its name


def _license(headers: Sequence[tuple[str, str]]) -> str | None:
    """License-Expression, else a short License, else the license classifiers' names."""
    meta = dict(reversed(headers))  # the first value of each header
    if meta.get("license-expression"):
        return meta["license-expression"]
    text = meta.get("license", "")
    if text and len(text) <= _LICENSE_TEXT_MAX and text.upper() not in ("UNKNOWN", "NONE"):
        return text
    names = [
        value.rpartition("::")[2].strip()
        for key, value in headers
        if key == "classifier"
        and value.startswith("License ::")
        and value.rpartition("::")[2].strip() not in ("", "OSI Approved")
    ]
    return "; ".join(names) if names else None


def _inspect(dist_info: Path) -> Distribution:
    headers = _headers(dist_info / "METADATA")
    meta = dict(headers)
    wheel = _headers(dist_info / "WHEEL") if (dist_info / "WHEEL").is_file() else []
    purelib = ("root-is-purelib", "true") in wheel
    tags = [value for key, value in wheel if key == "tag"]
    record = dist_info / "RECORD"
    files = record.read_text().splitlines() if record.is_file() else []
    native = any(NATIVE.search(line.split(",", 1)[0]) for line in files)
    universal = bool(tags) and all(tag.endswith("-none-any") for tag in tags)
    return Distribution(
        meta.get("name", "?"),
        meta.get("version", "?"),
        purelib and universal and not native,
        license=_license(headers),
        tags=frozenset(tags),
    )


def _wheel_tags(filename: str) -> frozenset[str] | None:
    try:
        _, _, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    return frozenset(str(tag) for tag in tags)


def _local(url: str) -> Path | None:
    parts = urlsplit(url)
    return Path(unquote(parts.path)) if parts.scheme == "file" else None


def _locked_hashes(
    dists: Sequence[Distribution], platform: str, python: str, env: Mapping[str, str]
) -> dict[str, str]:
    """name -> sha256 of the wheel uv picks for each of `dists` on `platform`.

    uv installs from its cache and keeps no wheel file, so the same pins go to
    `uv pip compile --format pylock.toml` (same index settings, same platform): the
    lock names each wheel file with its hash, and the one whose tags equal the
    installed WHEEL's tags is the one installed.
    """
    uv = uv_binary()
    if not dists or uv is None or platform not in _UV_PLATFORMS:
        return {}
    command = [
        *(uv, "pip", "compile", "--quiet", "--no-header", "--format", "pylock.toml"),
        *("--no-deps", "--only-binary", ":all:", "--python-platform", _UV_PLATFORMS[platform]),
        *("--python-version", python, "-"),
    ]
    done = subprocess.run(
        command,
        input="".join(f"{d.name}=={d.version}\n" for d in dists),
        capture_output=True,
        text=True,
        env={**installer_env(env), **target_env(platform)},
        cwd=tempfile.gettempdir(),
        check=False,
        timeout=300,
    )
    if done.returncode != 0:
        return {}
    try:
        packages = _toml.loads(done.stdout).get("packages", [])
    except tomllib.TOMLDecodeError:
        return {}
    found: dict[str, str] = {}
    wanted = {str(canonicalize_name(d.name)): d for d in dists}
    for package in packages if isinstance(packages, list) else []:
        dist = wanted.get(str(canonicalize_name(str(package.get("name", "")))))
        if dist is None:
            continue
        for wheel in package.get("wheels") or []:
            where = str(wheel.get("url") or wheel.get("path") or "")
            filename = str(wheel.get("name") or unquote(where.rsplit("/", 1)[-1]))
            if _wheel_tags(filename) != dist.tags:
                continue
            digest = (wheel.get("hashes") or {}).get("sha256")
            path = _local(where) if "url" in wheel else Path(where) if where else None
            if digest is None and path is not None and path.is_file():
                digest = sha256_file(path)
            if isinstance(digest, str):
                found[str(canonicalize_name(dist.name))] = digest
    return found


def _reported_hashes(report: Path) -> dict[str, str]:
    """name -> sha256 from pip's installation report (the index's hash of each file)."""
    try:
        data = json.loads(report.read_text())
    except (OSError, ValueError):
        return {}
    found: dict[str, str] = {}
    for item in data.get("install", []) if isinstance(data, dict) else []:
        info = item.get("download_info") or {}
        digest = ((info.get("archive_info") or {}).get("hashes") or {}).get("sha256")
        name = (item.get("metadata") or {}).get("name")
        if isinstance(digest, str) and isinstance(name, str):
            found[str(canonicalize_name(name))] = digest
    return found


def _with_hashes(
    dists: Sequence[Distribution],
    wheels: Sequence[Path],
    others: Mapping[str, str],
) -> tuple[Distribution, ...]:
    """`dists` with the sha256 of their wheel: the given `wheels` (first-party) by
    file, the others from `others` (name -> sha256); unknown ones keep None."""
    own: dict[str, str] = {}
    for wheel in wheels:
        try:
            name = parse_wheel_filename(wheel.name)[0]
        except InvalidWheelFilename:
            continue
        own[str(name)] = sha256_file(wheel)
    out = []
    for dist in dists:
        key = str(canonicalize_name(dist.name))
        if key in own:
            out.append(replace(dist, sha256=own[key], first_party=True))
        else:
            out.append(replace(dist, sha256=others.get(key)))
    return tuple(out)


def _scrub(dest: Path) -> None:
    """Drop what names the build machine: scripts with its interpreter, install receipts."""
    shutil.rmtree(dest / "bin", ignore_errors=True)
    (dest / ".lock").unlink(missing_ok=True)  # uv's install lock
    for dist_info in sorted(dest.glob("*.dist-info")):
        for name in _VOLATILE:
            (dist_info / name).unlink(missing_ok=True)
        record = dist_info / "RECORD"
        if record.is_file():
            kept = [
                line
                for line in record.read_text().splitlines()
                if not line.startswith(("bin/", "../"))
                and line.split(",", 1)[0].rpartition("/")[2] not in _VOLATILE
            ]
            # A new file, not a rewrite: the old one may be a hard link into the installer's cache.
            record.unlink()
            record.write_text("".join(f"{line}\n" for line in kept))
    for cache in sorted(dest.rglob("__pycache__"), reverse=True):
        shutil.rmtree(cache, ignore_errors=True)


def _failure(log: Path, start: int, platform: str, python: str) -> str:
    with log.open("rb") as handle:
        handle.seek(start)  # this install's output only, when the log is shared
        text = handle.read().decode(errors="replace")
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
    locked = requirements if isinstance(requirements, Locked) else None
    if isinstance(requirements, Locked):
        requirements = requirements.file
    wheels = [wheels] if isinstance(wheels, Path) else list(wheels)
    wheel = wheels[0]
    if platform not in PLATFORM_ARCH:
        raise BuildError(f"resolve:{platform}", f"unknown platform {platform}")
    action = f"resolve:{wheel.name}:{platform}"
    dest.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=TEMP_PREFIX + "resolve-", dir=dest.parent) as tmp:
        if requirements is None:
            reqs = [str(w) for w in wheels]
            if extras:
                reqs[0] = _named(wheel, extras)
        else:
            built = locked.built if locked else ()
            pinned = _wheel_requirements(wheels, Path(tmp), extras, built)
            reqs = ["--require-hashes", "-r", str(requirements), "-r", str(pinned)]
            if locked and locked.exact:
                reqs.insert(0, "--no-deps")
        report = Path(tmp) / "report.json"
        command = _command(platform, python, dest, reqs, report)
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
        reported = _reported_hashes(report) if report.is_file() else None
    if returncode != 0:
        raise BuildError(action, _failure(log, start, platform, python), command=command, log=log)
    _scrub(dest)
    dists = tuple(
        sorted(
            (_inspect(d) for d in dest.glob("*.dist-info")),
            key=lambda d: d.name.lower(),
        )
    )
    names = set()
    for path in [*wheels, *(locked.built if locked else ())]:
        try:
            names.add(parse_wheel_filename(path.name)[0])
        except InvalidWheelFilename:
            continue
    others = [d for d in dists if canonicalize_name(d.name) not in names]
    if reported is None:  # uv: the same pins, locked, name each wheel with its hash
        reported = _locked_hashes(others, platform, python, env)
    for path in locked.built if locked else ():  # built here from a locked sdist
        reported.setdefault(str(parse_wheel_filename(path.name)[0]), sha256_file(path))
    dists = _with_hashes(dists, wheels, reported)
    unknown = sorted(d.name for d in dists if d.sha256 is None)
    if unknown:
        with log.open("a", encoding="utf-8") as handle:
            handle.write(f"no wheel hash known for {', '.join(unknown)} ({platform})\n")
    return Resolution(platform, dest, dists, all(d.pure for d in dists))
