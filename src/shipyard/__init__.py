"""shipyard: wheels, zipapps and multi-arch OCI images for Python monorepos from one manifest."""

import os
import sys

from shipyard.errors import BuildError, ManifestError, ShipyardError, UsageError


def _installed_version() -> str:
    """The Version of the installed shipyard distribution, "0.0.0" when it is not installed.

    Every action key holds the tool version, so every build asks for it. It is
    read from the dist-info's METADATA directly because importing
    importlib.metadata pulls in the email package, about 80 ms at each start:
    a sixth of the no-op build budget. importlib.metadata stays the fallback
    for anything unusual (eggs, zip imports, several copies on the path).
    """
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.isdir(here):
        # An installed wheel: the dist-info beside the package. A source tree (an
        # editable install) has none there: the first folder on the path with one.
        found = _dist_infos(here)
        for entry in sys.path if not found else ():
            found = _dist_infos(entry or ".")
            if found:
                break
        if len(found) == 1:
            stated = _metadata_version(found[0])
            if stated:
                return stated
    # Otherwise shipyard runs from an archive (its own zipapp): the archive's importer
    # knows its distribution, which a scan of sys.path would miss for another copy
    # installed in the interpreter running the zipapp.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("shipyard")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0.0.0"


def _dist_infos(folder: str) -> list[str]:
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [os.path.join(folder, n) for n in names if _is_our_dist_info(n)]


def _metadata_version(dist_info: str) -> str | None:
    try:
        with open(os.path.join(dist_info, "METADATA"), encoding="utf-8") as meta:
            for line in meta:
                if line.startswith("Version:"):
                    return line.partition(":")[2].strip()
                if not line.strip():
                    break  # end of the headers
    except OSError:
        pass
    return None


def _is_our_dist_info(name: str) -> bool:
    return name.lower().startswith("shipyard-") and name.endswith(".dist-info")


__version__ = _installed_version()

__all__ = ["BuildError", "ManifestError", "ShipyardError", "UsageError", "__version__"]
