"""mesh-discovery: an HTTP service registry mapping service names to addresses."""

from meshdiscovery.registry import InvalidServiceError, Registry, Service
from meshdiscovery.server import DiscoveryServer

__all__ = ["DiscoveryServer", "InvalidServiceError", "Registry", "Service"]
