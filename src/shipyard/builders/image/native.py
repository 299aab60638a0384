"""Native libraries an image's extension modules need and its base does not have.

A manylinux wheel links against libraries the manylinux policy assumes every Linux has
(libstdc++, libgcc_s, libm, libc ...); a slim base may lack some, and the image then
fails only when the module is imported ("libstdc++.so.6: cannot open shared object
file"). Before an image is written, every shared object shipyard adds (extension
modules and the libraries wheels vendor) is read for the libraries it needs
(`DT_NEEDED`), and each must be found: among the files the image's own layers add (a
wheel's vendored `<pkg>.libs/`, through RPATH/RUNPATH or a library loaded first), or
in the base's library folders (/lib, /usr/lib, /lib64, /usr/lib64, /usr/local/lib and
the folders below them). The base's library names come from what the base layer check
noted of each layer as it read it (`shipyard.oci.layercheck.recorded_libraries`; a
layer without a note is read here), merged once per base and remembered beside its
blobs.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import tarfile
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from shipyard._fs import atomic_write
from shipyard.builders.distributions import NATIVE
from shipyard.builders.image.layers import DEPS_SITE, LIBS_SITE, Roles, normal_name
from shipyard.builders.image.variants import VariantPlan
from shipyard.builders.resolve import Resolution
from shipyard.errors import ShipyardError
from shipyard.manifest import Image as ImageSettings
from shipyard.oci.base import Base
from shipyard.oci.elf import read_dynamic
from shipyard.oci.layer import BlobStore
from shipyard.oci.layercheck import LibraryEvent, library_event, recorded_libraries
from shipyard.oci.model import Layer

__all__ = ["ACCEPT_ALL", "MissingLibrary", "base_libraries", "check_native", "missing_libraries"]

ACCEPT_ALL = "*"
_NOTE_VERSION = "1"
_ZSTD = b"\x28\xb5\x2f\xfd"


@dataclass(frozen=True)
class MissingLibrary:
    """A library a shared object of the image needs that nothing in it provides."""

    library: str
    needed_by: str  # the object's path in the image
    distribution: str  # "name version" of the wheel it came from


def _entries(layer: Layer) -> Iterable[tarfile.TarInfo]:
    with layer.path.open("rb") as handle:
        magic = handle.read(4)
        handle.seek(0)
        if magic == _ZSTD:
            return  # checked (and refused) by the base layer check already
        source = gzip.GzipFile(fileobj=handle) if magic[:2] == b"\x1f\x8b" else handle
        with tarfile.open(fileobj=source, mode="r|") as tar:
            while (member := tar.next()) is not None:
                tar.members.clear()  # type: ignore[attr-defined]  # headers must not pile up
                yield member


def _events(layer: Layer, store: BlobStore) -> Iterable[LibraryEvent]:
    """The layer's library events: as the base layer check noted them, or read."""
    recorded = recorded_libraries(layer, store)
    if recorded is not None:
        return recorded
    found = []
    for member in _entries(layer):
        path = "/".join(p for p in member.name.split("/") if p not in ("", "."))
        if (event := library_event(path, isdir=member.isdir())) is not None:
            found.append(event)
    return found


def _list(layers: Sequence[Layer], store: BlobStore) -> list[str]:
    """The library files (and links) the merged layers leave in the library folders."""
    present: dict[str, int] = {}  # path -> the layer that made it
    for index, layer in enumerate(layers):
        for kind, path in _events(layer, store):
            if kind == "opaque":
                head = f"{path}/"
                for gone in [p for p, i in present.items() if p.startswith(head) and i < index]:
                    del present[gone]
            elif kind == "whiteout":
                for gone in [p for p in present if p == path or p.startswith(path + "/")]:
                    del present[gone]
            else:
                present[path] = index
    return sorted(present)


def base_libraries(layers: Sequence[Layer], store: BlobStore) -> frozenset[str]:
    """The library file names in the base whose `layers` these are (read once per base;
    the answer is kept beside the blobs)."""
    chain = hashlib.sha256("\n".join(x.descriptor.digest for x in layers).encode()).hexdigest()
    note = store.path("sha256:" + chain).with_suffix(".libraries")
    try:
        data = json.loads(note.read_bytes())
        if data.get("version") == _NOTE_VERSION and isinstance(data.get("paths"), list):
            return frozenset(str(p).rpartition("/")[2] for p in data["paths"])
    except (OSError, ValueError, AttributeError):
        pass
    try:
        paths = _list(layers, store)
    except (OSError, EOFError, zlib.error, tarfile.TarError):
        return frozenset()  # unreadable: the base layer check reports it
    note.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(note, json.dumps({"version": _NOTE_VERSION, "paths": paths}).encode())
    return frozenset(p.rpartition("/")[2] for p in paths)


def _owners(site: Path) -> dict[str, str]:
    """Site-relative path -> "name version" of the distribution whose RECORD lists it."""
    import csv
    import posixpath

    owners: dict[str, str] = {}
    for info in sorted(site.glob("*.dist-info")):
        name, _, version = info.name.removesuffix(".dist-info").rpartition("-")
        record = info / "RECORD"
        lines = record.read_text(encoding="utf-8").splitlines() if record.is_file() else []
        for row in csv.reader(lines):
            if row:
                owners[posixpath.normpath(row[0])] = f"{name} {version}"
    return owners


def missing_libraries(
    resolution: Resolution,
    base: frozenset[str],
    *,
    accept: Sequence[str] = (),
    image_path: Callable[[str, str], str] = lambda rel, _: rel,
) -> list[MissingLibrary]:
    """What the shared objects of `resolution`'s site need that neither the site nor
    `base` (library file names) provides, less the `accept`ed names ("*": all).
    `image_path(relative path, distribution)` names a file as the image has it."""
    if ACCEPT_ALL in accept:
        return []
    site = resolution.site
    objects = [p for p in sorted(site.rglob("*")) if NATIVE.search(p.name) and p.is_file()]
    if not objects:
        return []
    provided = {p.name for p in objects}
    read = {p: read_dynamic(p) for p in objects}
    provided.update(d.soname for d in read.values() if d is not None and d.soname)
    owners = _owners(site)
    missing = []
    for path, dynamic in read.items():
        if dynamic is None:
            continue
        rel = path.relative_to(site).as_posix()
        for library in dynamic.needed:
            if library in provided or library in base or library in accept or "/" in library:
                continue
            owner = owners.get(rel, "?")
            missing.append(MissingLibrary(library, image_path(rel, owner), owner))
    return missing


def check_native(
    platforms: Sequence[str],
    plan: VariantPlan,
    loaded: Mapping[str, Mapping[str, Base]],
    by_python: Mapping[str, Sequence[Resolution]],
    roles: Roles,
    store: BlobStore,
    settings: ImageSettings,
) -> None:
    """Refuse (exit 1) an image whose native code needs a library that neither its base
    nor its own files provide, for any platform and flavour, naming each library, the
    file that needs it and its distribution; `image.allow_missing_libraries` accepts."""
    accept = settings.allow_missing_libraries
    own = {roles.own}

    def image_path(rel: str, owner: str) -> str:
        name = normal_name(owner.partition(" ")[0])
        site = (
            roles.app_site if name in own else LIBS_SITE if name in roles.libraries else DEPS_SITE
        )
        return f"{site}/{rel}"

    lines: list[str] = []
    seen: set[tuple[str, str, str]] = set()
    for flavour in plan.flavours:
        for platform, resolution in zip(platforms, by_python[flavour.python], strict=True):
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
