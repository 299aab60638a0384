"""meshctl: register, list and deregister services in mesh-discovery."""

from meshctl.client import (
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
