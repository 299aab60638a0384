"""shipyard: wheels, zipapps and multi-arch OCI images for Python monorepos from one manifest."""

from importlib.metadata import PackageNotFoundError, version

from shipyard.errors import BuildError, ManifestError, ShipyardError, UsageError

try:
    __version__ = version("shipyard")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = ["BuildError", "ManifestError", "ShipyardError", "UsageError", "__version__"]
