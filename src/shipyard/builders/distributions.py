"""The distributions an installer put in a site, read from their dist-info folders.

Each is named, versioned and known to be pure or not, with its license and wheel
tags (`read_site`) and, once known, the sha256 of its wheel (`with_hashes`). What
names the build machine or the moment of the install (scripts with its interpreter,
install receipts, bytecode) is dropped from the site first (`scrub`).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from shipyard._fs import sha256_file

__all__ = ["NATIVE", "Distribution", "read_site", "reported_hashes", "scrub", "with_hashes"]

# Files that name this machine or this moment, not the distribution: dropped for reproducibility.
_VOLATILE = frozenset({"direct_url.json", "uv_cache.json"})
# A file the dynamic loader maps: an extension module or a vendored shared library.
NATIVE = re.compile(r"\.(so|pyd|dylib)(\.[0-9.]+)?$")


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


def read_site(site: Path) -> tuple[Distribution, ...]:
    """Every distribution installed in `site`, by name (case-insensitively)."""
    return tuple(
        sorted(
            (_inspect(d) for d in site.glob("*.dist-info")),
            key=lambda d: d.name.lower(),
        )
    )


def reported_hashes(report: Path) -> dict[str, str]:
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


def with_hashes(
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


def scrub(dest: Path) -> None:
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
