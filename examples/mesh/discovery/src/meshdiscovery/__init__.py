"""mesh-discovery: an HTTP service registry mapping service names to addresses.

The service records and their rules come from the mesh-api library (``meshapi``),
which meshctl uses as well; they are re-exported here for code that imported them
from meshdiscovery.
"""

from meshapi import InvalidServiceError, Service

from meshdiscovery.registry import Registry
from meshdiscovery.server import DiscoveryServer

__all__ = ["DiscoveryServer", "InvalidServiceError", "Registry", "Service"]
