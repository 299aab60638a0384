"""The bootstrap of every shipyard zipapp: its modules are copied verbatim into the archive.

Standard library only, and it imports little: startup time is the product. The
archive's site-packages is unpacked once per build into a cache folder, and the program
runs from there exactly as from a virtualenv: modules are files on disk (``__file__``,
``importlib.resources`` and ``importlib.metadata`` see what they would in a venv),
``.pth`` files are processed, the interpreter's own site-packages are left out, and
Python caches bytecode next to the modules. (Importing from the archive instead was
dropped: no faster cold, 1.7x slower warm, and it broke 3 of 10 corpus applications.)

The archive's __main__.py (`layout.MAIN`) compiles on every Python from 2.7 on and
refuses one older than 3.7 with one line before the bootstrap, which needs 3.7, is
compiled; then it runs the bootstrap's modules (`layout.PARTS`) as the package
`_shipyard_boot`, this module last, and calls `main`. Each module has one job: the
machine and whether the archive was built for it (`host`), where the cache is and
whether it can be trusted (`trust`), its private folders and locks (`folders`),
copying the site out of the archive (`extract`), and the build folders, held and
pruned (`cache`). When the cache cannot be trusted the zipapp says why on stderr and
runs without it: it unpacks into a private temporary folder, removed at exit. So it
does, with a one-line warning, when the default cache folder cannot be written (a
home that is not writable); a folder named by $SHIPYARD_ZIPAPP_ROOT that cannot be
written is an error (exit status 2).
"""

from __future__ import annotations

import marshal
import os
import sys
import zipimport

from .cache import KEEP_ENV, builds_to_keep, hold, is_build_id, prune, unpack, unpack_private
from .host import BootError, check_target, machine, system
from .layout import BOOT_DATA, SITE
from .trust import ROOT_ENV, UntrustedCache, UnwritableCache, cache_root, untrusted

# Not `typing.TYPE_CHECKING`: importing typing (or json, which imports re) costs more
# than the rest of the bootstrap on a Python that has not loaded them yet.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = [
    "KEEP_ENV",
    "ROOT_ENV",
    "BootError",
    "UntrustedCache",
    "UnwritableCache",
    "cache_root",
    "check_target",
    "hold",
    "machine",
    "main",
    "prune",
    "system",
    "unpack",
    "unpack_private",
    "untrusted",
]


def _site(archive: str, info: Mapping[str, Any], root: str, home: str) -> str:
    """Where the unpacked site is: in the build's folder `home` when it can be trusted
    and written, held while this process runs (a new one prunes older builds of the
    binary); else, after one warning line, in a private temporary folder. BootError when
    the zipapp cannot run at all (including $SHIPYARD_ZIPAPP_ROOT not writable).
    """
    site = os.path.join(home, SITE)
    reason = untrusted(root, site)
    warning = ""
    if not reason:
        try:
            made = hold(root, home, str(info["binary"]))
            unpacked = unpack(archive, site, root)
            if made:
                prune(root, str(info["binary"]), builds_to_keep(os.environ), os.path.basename(home))
            return unpacked
        except UntrustedCache as exc:
            reason = str(exc)
        except UnwritableCache as exc:
            if os.environ.get(ROOT_ENV):
                raise  # the folder asked for cannot be used: say so, and how to fix it
            # The default folder: a home that is not writable (a service account, a
            # read-only root file system) is no reason not to run.
            warning = (
                f"{info['binary']}: warning: cannot write the zipapp cache in {root} "
                f"({exc.reason}); running from a private temporary folder removed at "
                f"exit (set {ROOT_ENV} to a writable directory to keep the cache)\n"
            )
    if reason:
        warning = (
            f"{info['binary']}: warning: not using the zipapp cache, {reason}; running "
            f"without it (make the folder yours and not writable by group or others, "
            f"or set {ROOT_ENV} to one that is)\n"
        )
    sys.stderr.write(warning)
    return unpack_private(archive)


def _activate(site_dir: str, archive: str) -> None:
    """Make sys.path a virtualenv's: the unpacked site where the interpreter's own
    site-packages were (those are left out), after the standard library, with its
    .pth files processed; the archive itself is taken off the path."""
    if sys.path and os.path.abspath(sys.path[0]) == archive:
        del sys.path[0]
    site_module = sys.modules.get("site")  # absent under python -S: no .pth files then
    theirs: set[str] = set()
    if site_module is not None:
        theirs.update(site_module.getsitepackages())
        theirs.add(site_module.getusersitepackages())
    at = next((i for i, entry in enumerate(sys.path) if entry in theirs), len(sys.path))
    sys.path[:] = [entry for entry in sys.path if entry not in theirs]
    sys.path.insert(at, site_dir)
    if site_module is not None:
        site_module.addsitedir(site_dir)


def main(archive: str) -> None:
    """Check the target, unpack the site of `archive` (once), run the entry point, exit."""
    info = marshal.loads(zipimport.zipimporter(archive).get_data(BOOT_DATA))
    build_id = str(info["build_id"])
    if not is_build_id(build_id):
        sys.stderr.write(f"{info['binary']}: the archive is damaged (bad build id)\n")
        raise SystemExit(2)
    root = os.path.realpath(cache_root(os.environ))
    try:
        check_target(info, (sys.version_info[0], sys.version_info[1]), system(), machine())
        site = _site(archive, info, root, os.path.join(root, build_id))
    except BootError as exc:
        sys.stderr.write(f"{info['binary']}: {exc}\n")
        raise SystemExit(2) from None
    _activate(site, archive)
    module, _, attrs = str(info["entrypoint"]).partition(":")
    __import__(module)
    target: Any = sys.modules[module]
    for attr in attrs.split("."):
        target = getattr(target, attr)
    sys.exit(target())
