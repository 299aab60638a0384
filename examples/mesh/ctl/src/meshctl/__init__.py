"""meshctl: register, list and deregister services in mesh-discovery.

The client and the service records come from the mesh-api library (``meshapi``);
they are re-exported here for code that imported them from meshctl.
"""

from meshapi import (
    DiscoveryClient,
    DiscoveryError,
    DiscoveryProtocolError,
    DiscoveryRequestError,
    DiscoveryUnreachableError,
    Service,
)

__all__ = [
    "DiscoveryClient",
    "DiscoveryError",
    "DiscoveryProtocolError",
    "DiscoveryRequestError",
    "DiscoveryUnreachableError",
    "Service",
]
