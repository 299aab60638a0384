"""Locked dependencies published only as a source distribution, built once into wheels.

Images and zipapps install binary wheels only (nothing is compiled for a machine it
does not run on). A locked package with an sdist and no wheel (html2text before 2025,
many small pure-Python projects) would stop the install; pip, uv, pex and shiv all build
such an sdist instead. So does shipyard, once: the sdist the lock names is fetched and
checked against the lock's hash, built by uv in an isolated environment (the backend
from the configured index, at a fixed clock so the wheel's bytes repeat), and the wheel
is cached under the sdist's sha256. A pure wheel (`py3-none-any`) serves every target
platform; a platform wheel is refused, naming the package and what to do, since it was
built for this machine and not for the targets.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from shipyard._fs import TEMP_PREFIX, exclusive, publish_file, sha256_file
from shipyard.errors import BuildError
from shipyard.process import installer_env, run_logged

__all__ = ["LockedSdist", "sdist_only", "wheel_from_sdist", "without"]

# The clock the backends stamp into the wheels they build (1980-01-01, the zip epoch).
_EPOCH = "315532800"
_DOWNLOAD_TIMEOUT = 300


@dataclass(frozen=True)
class LockedSdist:
    """A locked package that only an sdist provides: where it is and its sha256."""

    name: str
    version: str
    location: str  # a URL, or a path (relative ones to the lock's folder)
    sha256: str


def _blocks(text: str) -> list[list[str]]:
    """A requirements file's entries: each a first line and its continuation lines."""
    blocks: list[list[str]] = []
    continued = False
    for line in text.splitlines():
        if continued and blocks:
            blocks[-1].append(line)
        else:
            blocks.append([line])
        continued = line.rstrip().endswith("\\")
    return blocks


def _pin(block: Sequence[str]) -> tuple[str, str] | None:
    """(canonical name, version) of an `name==version ...` entry, else None."""
    first = block[0].rstrip().removesuffix("\\").strip()
    if not first or first.startswith(("#", "-")):
        return None
    try:
        req = Requirement(first)
    except InvalidRequirement:
        return None
    pins = [s.version for s in req.specifier if s.operator in ("==", "===")]
    return (str(canonicalize_name(req.name)), pins[0]) if pins else None


def sdist_only(
    requirements: Path, packages: Mapping[str, Sequence[Mapping[str, Any]]]
) -> list[LockedSdist]:
    """The entries of `requirements` (as `uv export` writes them) whose locked package
    (`packages`: uv.lock's tables by canonical name) has an sdist and no wheel."""
    found = []
    for block in _blocks(requirements.read_text(encoding="utf-8")):
        pin = _pin(block)
        if pin is None:
            continue
        name, version = pin
        for package in packages.get(name, ()):
            if str(package.get("version")) != version or package.get("wheels"):
                continue
            sdist = package.get("sdist")
            if not isinstance(sdist, Mapping):
                continue
            where = sdist.get("url") or sdist.get("path")
            digest = str(sdist.get("hash", ""))
            if isinstance(where, str) and digest.startswith("sha256:"):
                found.append(LockedSdist(name, version, where, digest.removeprefix("sha256:")))
    return found


def without(requirements: Path, names: Sequence[str]) -> None:
    """Rewrite `requirements` with the entries for `names` (canonical) left out."""
    drop = set(names)
    kept = [
        block
        for block in _blocks(requirements.read_text(encoding="utf-8"))
        if (_pin(block) or ("", ""))[0] not in drop
    ]
    requirements.write_text("".join(f"{line}\n" for block in kept for line in block))


def _fetch(sdist: LockedSdist, lock_dir: Path, dest: Path, action: str) -> None:
    parts = urlsplit(sdist.location)
    if parts.scheme in ("http", "https"):
        import requests

        try:
            with requests.get(sdist.location, stream=True, timeout=_DOWNLOAD_TIMEOUT) as got:
                got.raise_for_status()
                with dest.open("wb") as out:
                    for chunk in got.iter_content(1 << 16):
                        out.write(chunk)
        except (requests.RequestException, OSError) as exc:
            raise BuildError(action, f"downloading {sdist.location} failed: {exc}") from None
    else:
        source = Path(unquote(parts.path)) if parts.scheme == "file" else Path(sdist.location)
        source = source if source.is_absolute() else lock_dir / source
        try:
            shutil.copyfile(source, dest)
        except OSError as exc:
            raise BuildError(action, f"reading {source} failed: {exc.strerror}") from None
    got_hash = sha256_file(dest)
    if got_hash != sdist.sha256:
        raise BuildError(
            action,
            f"{sdist.location} has sha256 {got_hash}, but uv.lock records {sdist.sha256}; "
            "the file changed on the index: run `uv lock` and review the change",
        )


def wheel_from_sdist(
    sdist: LockedSdist,
    *,
    lock_dir: Path,
    cache: Path,
    uv: str,
    env: Mapping[str, str],
    log: Path,
) -> Path:
    """The pure wheel built from `sdist`, from `cache` when built before.

    BuildError when the sdist cannot be fetched, does not match the lock's hash, fails
    to build, or builds a platform wheel."""
    from shipyard.engine.cache.local import SDIST_WHEELS

    action = f"sdist:{sdist.name}=={sdist.version}"
    home = cache / SDIST_WHEELS / sdist.sha256
    built = sorted(home.glob("*.whl")) if home.is_dir() else []
    if built:
        return built[0]
    home.mkdir(parents=True, exist_ok=True)
    with exclusive(home / ".lock"):
        built = sorted(home.glob("*.whl"))
        if built:
            return built[0]
        with tempfile.TemporaryDirectory(prefix=TEMP_PREFIX + "sdist-", dir=home) as tmp:
            name = unquote(urlsplit(sdist.location).path).rpartition("/")[2] or "sdist.tar.gz"
            archive = Path(tmp) / name
            _fetch(sdist, lock_dir, archive, action)
            wheel = _build(sdist, archive, Path(tmp), uv=uv, env=env, log=log, action=action)
            publish_file(wheel, home / wheel.name)
    return home / wheel.name


def _build(
    sdist: LockedSdist,
    archive: Path,
    tmp: Path,
    *,
    uv: str,
    env: Mapping[str, str],
    log: Path,
    action: str,
) -> Path:
    """The one wheel `uv build` makes of the sdist file `archive` in `tmp`, isolated and
    with SOURCE_DATE_EPOCH fixed; BuildError when the build fails or the wheel is not pure."""
    out = tmp / "out"
    command = [
        *(uv, "build", "--wheel", "--no-config", "--no-progress"),
        *(str(archive), "--out-dir", str(out)),
    ]
    with log.open("ab") as handle:
        handle.write(f"$ {' '.join(command)}\n".encode())
    returncode = run_logged(
        command,
        log,
        env={**installer_env(env), "SOURCE_DATE_EPOCH": _EPOCH, "PYTHONHASHSEED": "0"},
        cwd=tmp,
    )
    wheels = sorted(out.glob("*.whl")) if out.is_dir() else []
    if returncode != 0 or len(wheels) != 1:
        raise BuildError(
            action,
            f"{sdist.name} {sdist.version} has no wheel in uv.lock, only an sdist, "
            "and building it failed; pin a version that publishes a wheel, or "
            "give the binary `requirements:` naming one",
            command=command,
            log=log,
        )
    _check_pure(sdist, wheels[0], action, log)
    return wheels[0]


def _check_pure(sdist: LockedSdist, wheel: Path, action: str, log: Path) -> None:
    """Refuse a wheel with native code: it was built for this machine, not for the
    binary's platforms."""
    try:
        tags = parse_wheel_filename(wheel.name)[3]
    except InvalidWheelFilename:
        tags = frozenset()
    if not tags or any(t.abi != "none" or t.platform != "any" for t in tags):
        raise BuildError(
            action,
            f"{sdist.name} {sdist.version} has no wheel in uv.lock, only an sdist, "
            f"which builds {wheel.name}: native code built for this machine, not "
            "for the binary's platforms. Pin a version that publishes wheels for "
            "them, publish such wheels to your index, or drop the platforms it "
            "cannot serve",
            log=log,
        )
