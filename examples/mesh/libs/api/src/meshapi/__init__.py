"""mesh-api: the mesh-discovery API shared by mesh-discovery (the server) and meshctl.

The service records and their validation rules (`meshapi.model`) and a typed HTTP
client (`meshapi.client`).
"""

from importlib import metadata

from meshapi.client import (
    DiscoveryClient,
    DiscoveryError,
    DiscoveryProtocolError,
    DiscoveryRequestError,
    DiscoveryUnreachableError,
)
from meshapi.model import (
    DEFAULT_PORT,
    SERVICES_PATH,
    InvalidServiceError,
    Service,
    service_path,
    validate_address,
    validate_name,
)

__all__ = [
    "DEFAULT_PORT",
    "DISTRIBUTION",
    "SERVICES_PATH",
    "DiscoveryClient",
    "DiscoveryError",
    "DiscoveryProtocolError",
    "DiscoveryRequestError",
    "DiscoveryUnreachableError",
    "InvalidServiceError",
    "Service",
    "installed_version",
    "service_path",
    "validate_address",
    "validate_name",
]

DISTRIBUTION = "mesh-api"
"""The distribution (project) name this package is installed as."""


def installed_version() -> str:
    """The installed mesh-api's version, or ``0.0.0+source`` when imported from a source tree."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0.0.0+source"
