"""The bootstrap of every shipyard zipapp, copied verbatim into the archive as _shipyard/boot.py.

Standard library only, and it imports little: startup time is the product. Pure Python
is imported straight from the archive, its bytecode cached per build; native code is
unpacked once per build into a cache folder that processes share safely.
"""

from __future__ import annotations

import marshal
import os
import sys
import zipimport
from importlib.machinery import ModuleSpec

# Not `typing.TYPE_CHECKING`: importing typing (or json, which imports re) costs more
# than the rest of the bootstrap on a Python that has not loaded them yet.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence
    from types import CodeType, ModuleType
    from typing import Any

__all__ = ["ROOT_ENV", "ArchiveImporter", "BootError", "cache_root", "check_target", "unpack"]

BUILD_INFO = "_shipyard/build.json"
SOURCE = "_shipyard/boot.py"
# This module compiled for one interpreter, named by that interpreter's magic number.
CODE = "_shipyard/boot-%s.bin"
# What the bootstrap reads: build info, module index and distributions, as marshal
# format 2 (readable by every Python 3, so even a wrong interpreter gets the message).
BOOT_DATA = "_shipyard/boot.marshal"
SITE = "site"
# The archive's __main__.py. Python compiles it twice on every start (zipimport asks
# for the file name, then the code), so it is kept tiny: it runs this module from
# code compiled at build time when the interpreter matches, else from source.
MAIN = """\
import marshal, os, sys, zipimport
def _boot():
    archive = os.path.dirname(os.path.abspath(__file__))
    reader = zipimport.zipimporter(archive)
    try:
        import _frozen_importlib_external as external
        name = "_shipyard/boot-%s.bin" % external.MAGIC_NUMBER.hex()
        code = marshal.loads(reader.get_data(name))
    except (ImportError, AttributeError, OSError, ValueError, EOFError, TypeError):
        path = os.path.join(archive, "_shipyard", "boot.py")
        code = compile(reader.get_data("_shipyard/boot.py"), path, "exec", dont_inherit=True)
    module = type(sys)("_shipyard_boot")
    sys.modules[module.__name__] = module
    exec(code, module.__dict__)
    module.main(archive)
_boot()
"""
ROOT_ENV = "SHIPYARD_ZIPAPP_ROOT"
# OCI architecture -> the names os.uname() gives that machine.
MACHINES = {
    "amd64": ("x86_64", "amd64"),
    "arm64": ("aarch64", "arm64", "armv8l"),
    "arm/v7": ("armv7l", "armv8l"),
    "386": ("i386", "i686"),
    "ppc64le": ("ppc64le",),
    "s390x": ("s390x",),
    "riscv64": ("riscv64",),
}


class BootError(Exception):
    """Why the zipapp cannot start on this machine; shown as one line, exit status 2."""


def check_target(
    info: Mapping[str, Any], version: tuple[int, int], system: str, machine: str
) -> None:
    """Refuse a Python or a platform the archive was not built for, naming the fix."""
    want = str(info["python"])
    have = f"{version[0]}.{version[1]}"
    if have != want:
        raise BootError(
            f"built for Python {want}, but this is Python {have} ({sys.executable}); "
            f"run it with python{want}"
        )
    platforms = [str(p) for p in info["platforms"]]
    machines = [p.partition("/")[2] for p in platforms if p.partition("/")[0] == system]
    if info["platform"] == "any" and machines:
        return  # pure Python: any machine of a targeted OS
    if any(machine in MACHINES.get(arch, (arch,)) for arch in machines):
        return
    here = next((a for a, names in MACHINES.items() if machine in names), machine)
    raise BootError(
        f"built for {', '.join(platforms)}, but this machine is {system}/{here}; "
        f"use {info['binary']}-{info['version']}-{system}_{here.replace('/', '_')}.pyz"
    )


def cache_root(environ: Mapping[str, str]) -> str:
    """Where builds unpack: $SHIPYARD_ZIPAPP_ROOT, else the user cache folder."""
    if environ.get(ROOT_ENV):
        return environ[ROOT_ENV]
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "shipyard", "zipapps")


def _extract(archive: str, tops: Sequence[str], folder: str) -> None:
    import shutil
    import zipfile

    prefixes = tuple(f"{SITE}/{top}" for top in tops)
    with zipfile.ZipFile(archive) as source:
        for info in source.infolist():
            name = info.filename
            if info.is_dir() or not any(name == p or name.startswith(p + "/") for p in prefixes):
                continue
            parts = name.split("/")[1:]
            # Only plain relative names: nothing may land outside `folder`.
            if "\0" in name or any(part in ("", ".", "..") for part in parts):
                raise BootError(f"the archive is damaged: it holds an unsafe name {name!r}")
            path = os.path.join(folder, *parts)
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with source.open(info) as src, open(path, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            except (FileExistsError, NotADirectoryError, IsADirectoryError):
                raise BootError(
                    f"the archive is damaged: {name!r} is a file and a folder"
                ) from None
            # Regular files only, 0755 or 0644: no setuid, no world-writable, no links.
            os.chmod(path, 0o755 if (info.external_attr >> 16) & 0o111 else 0o644)


def unpack(archive: str, tops: Sequence[str], target: str) -> str:
    """Unpack the top-level entries `tops` of the archive's site into `target`, once.

    The copy is made in a temporary folder and renamed into place, so `target` is
    complete whenever it exists; when two processes race, the loser of the rename
    uses the winner's copy.
    """
    if os.path.isdir(target):
        return target
    import shutil
    import tempfile

    parent = os.path.dirname(target)
    temp = ""
    try:
        os.makedirs(parent, exist_ok=True)
        temp = tempfile.mkdtemp(prefix=".unpack-", dir=parent)
        _extract(archive, tops, temp)
        try:
            os.rename(temp, target)
        except OSError:
            if not os.path.isdir(target):
                raise
    except OSError as exc:
        raise BootError(
            f"cannot unpack native code into {parent} ({exc.strerror or exc}); "
            f"set {ROOT_ENV} to a writable directory"
        ) from None
    finally:
        if temp and os.path.isdir(temp):
            shutil.rmtree(temp, ignore_errors=True)
    return target


def _normalize(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "_", name).lower()


class ArchiveImporter:
    """Finds and loads the archive's pure modules by name, caching their bytecode on disk.

    Also finds the archive's distributions for importlib.metadata, which cannot see
    into a folder inside a zip on its own.
    """

    def __init__(
        self,
        archive: str,
        modules: Mapping[str, str],
        dists: Sequence[str],
        bytecode: str | None,
        compiled: bool = False,
    ) -> None:
        self.archive = archive
        self.site = archive + os.sep + SITE
        self.modules = modules
        self.dists = dists
        self.bytecode = bytecode
        self.compiled = compiled
        self._zip = zipimport.zipimporter(archive)
        self._made = False

    def _origin(self, fullname: str) -> str:
        return self.site + os.sep + self.modules[fullname].replace("/", os.sep)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        """A spec for a module of the archive, or None to let the next finder look."""
        if fullname not in self.modules:
            return None
        origin = self._origin(fullname)
        package = self.is_package(fullname)
        spec = ModuleSpec(fullname, self, origin=origin, is_package=package)  # type: ignore[arg-type]
        spec.has_location = True
        if package:
            spec.submodule_search_locations = [os.path.dirname(origin)]
        return spec

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        """Default module creation."""
        return None

    def exec_module(self, module: ModuleType) -> None:
        """Run the module's code in its namespace."""
        exec(self.get_code(module.__name__), module.__dict__)

    def _cached(self, fullname: str, origin: str) -> CodeType | None:
        try:
            if self.compiled:
                data = self._zip.get_data(origin + "c")[16:]  # past the pyc header
            elif self.bytecode:
                with open(os.path.join(self.bytecode, fullname + ".pyc"), "rb") as handle:
                    data = handle.read()
            else:
                return None
            code = marshal.loads(data)
        except (OSError, ValueError, EOFError, TypeError):
            return None
        if type(code).__name__ != "code":
            return None
        if code.co_filename != origin:  # the archive moved since the bytecode was written
            import _imp

            _imp._fix_co_filename(code, origin)  # type: ignore[attr-defined]
        code_object: CodeType = code
        return code_object

    def _store(self, fullname: str, code: CodeType) -> None:
        if not self.bytecode:
            return
        path = os.path.join(self.bytecode, fullname + ".pyc")
        temp = f"{path}.{os.getpid()}.tmp"
        try:
            if not self._made:
                os.makedirs(self.bytecode, exist_ok=True)
                self._made = True
            with open(temp, "wb") as handle:
                handle.write(marshal.dumps(code))
            os.replace(temp, path)
        except OSError:
            self.bytecode = None  # a read-only cache: run from source, don't retry per module

    def get_code(self, fullname: str) -> CodeType:
        """The module's code: cached bytecode when there is some, else compiled and cached."""
        origin = self._origin(fullname)
        code = self._cached(fullname, origin)
        if code is None:
            source = self._zip.get_data(origin)
            code = compile(source, origin, "exec", dont_inherit=True)
            self._store(fullname, code)
        return code

    def get_source(self, fullname: str) -> str:
        """The module's source text, for tracebacks and inspect."""
        from importlib.util import decode_source

        return decode_source(self._zip.get_data(self._origin(fullname)))

    def get_data(self, path: str) -> bytes:
        """The bytes of a file in the archive, for pkgutil.get_data and friends."""
        return self._zip.get_data(path)

    def get_filename(self, fullname: str) -> str:
        """Where the module is, inside the archive."""
        return self._origin(fullname)

    def is_package(self, fullname: str) -> bool:
        """Whether the module is a regular package."""
        return self.modules[fullname].endswith("/__init__.py")

    def get_resource_reader(self, fullname: str) -> Any:
        """importlib.resources access to a package's files in the archive."""
        if fullname not in self.modules or not self.is_package(fullname):
            return None
        from importlib.readers import ZipReader

        parent = self._origin(fullname).rsplit(os.sep, 2)[0]
        return ZipReader(zipimport.zipimporter(parent), fullname)

    def find_distributions(self, context: Any = None) -> Iterator[Any]:
        """The archive's .dist-info folders matching `context.name` (all when None)."""
        import zipfile
        from importlib.metadata import PathDistribution

        name = getattr(context, "name", None)
        want = _normalize(name) if name else None
        for dist in self.dists:
            if want is None or _normalize(dist.partition("-")[0]) == want:
                yield PathDistribution(zipfile.Path(self.archive, f"{SITE}/{dist}/"))


def main(archive: str) -> None:
    """Check the target, set up imports from `archive`, run the entry point and exit."""
    boot = marshal.loads(zipimport.zipimporter(archive).get_data(BOOT_DATA))
    info = boot["info"]
    build_id = str(info["build_id"])
    if len(build_id) != 64 or not all(c in "0123456789abcdef" for c in build_id):
        sys.stderr.write(f"{info['binary']}: the archive is damaged (bad build id)\n")
        raise SystemExit(2)
    home = os.path.join(os.path.abspath(cache_root(os.environ)), build_id)
    native = ""
    try:
        machine = os.uname().machine if hasattr(os, "uname") else "unknown"
        check_target(info, (sys.version_info[0], sys.version_info[1]), sys.platform, machine)
        if info["extract"]:
            native = unpack(archive, info["extract"], os.path.join(home, SITE))
    except BootError as exc:
        sys.stderr.write(f"{info['binary']}: {exc}\n")
        raise SystemExit(2) from None
    compiled = bool(info["compiled"])
    bytecode = None if compiled else os.path.join(home, "bytecode")
    importer = ArchiveImporter(archive, boot["modules"], boot["dists"], bytecode, compiled)
    if sys.path and os.path.abspath(sys.path[0]) == archive:
        sys.path[0] = importer.site
    else:
        sys.path.insert(0, importer.site)
    if native:
        sys.path.insert(0, native)
    names = [getattr(f, "__name__", "") for f in sys.meta_path]
    at = names.index("PathFinder") if "PathFinder" in names else len(names)
    sys.meta_path.insert(at, importer)
    module, _, attrs = str(info["entrypoint"]).partition(":")
    __import__(module)
    target: Any = sys.modules[module]
    for attr in attrs.split("."):
        target = getattr(target, attr)
    sys.exit(target())
