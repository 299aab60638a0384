"""Asking the installer for a target platform's wheels: uv where it can target the
platform, else pip with the platform's --platform tags.

Nothing is built or run for the target: only binary wheels are taken, so an arm64
site-packages is made on an amd64 host. uv installs from its cache and keeps no wheel
file, so the wheels' hashes come from a lock uv makes of the same pins
(`locked_hashes`), from the index pages the install left in uv's cache.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from shipyard import _toml
from shipyard._fs import sha256_file
from shipyard.builders.distributions import Distribution
from shipyard.process import installer_env, uv_binary

__all__ = [
    "MACOS",
    "PLATFORM_ARCH",
    "install_command",
    "interpreter_used",
    "locked_hashes",
    "target_env",
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
# How uv names the interpreter it found (and uses for builds) in its output.
_UV_INTERPRETER = re.compile(r"^Using \S+ \S+ interpreter at: (?P<path>\S.*?)\s*$", re.MULTILINE)
# The platforms uv can target; the rest go through pip's --platform.
_UV_PLATFORMS = {
    "linux/amd64": "x86_64-manylinux_2_28",
    "linux/arm64": "aarch64-manylinux_2_28",
    "darwin/amd64": "x86_64-apple-darwin",
    "darwin/arm64": "aarch64-apple-darwin",
    "windows/amd64": "x86_64-pc-windows-msvc",
    "windows/arm64": "aarch64-pc-windows-msvc",
}


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


def install_command(
    platform: str, python: str, dest: Path, reqs: list[str], report: Path | None = None
) -> list[str]:
    """The command that installs `reqs` into `dest` for `platform` and CPython `python`:
    uv's, else pip's, which writes its installation report to `report`."""
    uv = uv_binary()
    if uv and platform in _UV_PLATFORMS:
        return [
            *(uv, "pip", "install", "--target", str(dest), "--no-progress"),
            # The running interpreter: uv's own search would start whatever `python3`
            # is on PATH (a version manager's shell shim costs more than the install of
            # cached wheels); the platform and version flags decide the wheels.
            *("--python", sys.executable),
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


def interpreter_used(output: str) -> str | None:
    """The interpreter uv's install `output` says it found, if that file is there."""
    match = _UV_INTERPRETER.search(output)
    if match is None or not Path(match["path"]).is_file():
        return None
    return match["path"]


def _wheel_tags(filename: str) -> frozenset[str] | None:
    try:
        _, _, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    return frozenset(str(tag) for tag in tags)


def _local(url: str) -> Path | None:
    parts = urlsplit(url)
    return Path(unquote(parts.path)) if parts.scheme == "file" else None


def locked_hashes(
    dists: Sequence[Distribution],
    platform: str,
    python: str,
    env: Mapping[str, str],
    interpreter: str | None = None,
) -> dict[str, str]:
    """name -> sha256 of the wheel uv picks for each of `dists` on `platform`.

    uv installs from its cache and keeps no wheel file, so the same pins go to
    `uv pip compile --format pylock.toml` (same index settings, same platform): the
    lock names each wheel file with its hash, and the one whose tags equal the
    installed WHEEL's tags is the one installed. First offline, from the index pages
    the install has just read into uv's cache, with the `interpreter` the install
    used (uv's search for one can cost more than the rest); only when that fails (no
    cache, a page missing) is the index asked again.
    """
    uv = uv_binary()
    if not dists or uv is None or platform not in _UV_PLATFORMS:
        return {}
    cached = ("--offline", *(("--python", interpreter) if interpreter else ()))
    found = _compiled_hashes(uv, dists, platform, python, env, cached)
    if found is None:
        found = _compiled_hashes(uv, dists, platform, python, env, ())
    return found or {}


def _compiled_hashes(
    uv: str,
    dists: Sequence[Distribution],
    platform: str,
    python: str,
    env: Mapping[str, str],
    options: Sequence[str],
) -> dict[str, str] | None:
    """`locked_hashes` from one `uv pip compile` of `dists`' pins with `options`; None
    when uv fails or its lock cannot be read."""
    command = [
        *(uv, "pip", "compile", "--quiet", "--no-header", "--format", "pylock.toml", *options),
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
        return None
    try:
        packages = _toml.loads(done.stdout).get("packages", [])
    except tomllib.TOMLDecodeError:
        return None
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
