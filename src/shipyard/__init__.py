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
    found: list[str] = []
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        found += [os.path.join(entry, n) for n in names if _is_our_dist_info(n)]
        if found:
            break
    if len(found) == 1:
        try:
            with open(os.path.join(found[0], "METADATA"), encoding="utf-8") as meta:
                for line in meta:
                    if line.startswith("Version:"):
                        return line.partition(":")[2].strip()
                    if not line.strip():
                        break  # end of the headers
        except OSError:
            pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("shipyard")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0.0.0"


def _is_our_dist_info(name: str) -> bool:
    return name.lower().startswith("shipyard-") and name.endswith(".dist-info")


__version__ = _installed_version()

__all__ = ["BuildError", "ManifestError", "ShipyardError", "UsageError", "__version__"]
