"""The service registry: a thread-safe map from service name to address."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

__all__ = ["InvalidServiceError", "Registry", "Service"]

# A DNS label (RFC 1123), so that a registered name can double as a hostname in the mesh.
_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
# The longest DNS name plus ":65535"; anything longer is a client bug, not an address.
_MAX_ADDRESS_LENGTH = 253 + 6


class InvalidServiceError(ValueError):
    """A service name or address that the registry refuses to store."""


@dataclass(frozen=True)
class Service:
    """One registered service: its name and the address it is reached at."""

    name: str
    address: str

    def to_json(self) -> dict[str, str]:
        """The JSON object the HTTP API uses for this service."""
        return {"name": self.name, "address": self.address}


def validate_name(name: str) -> str:
    """Return ``name`` if it is a valid service name, else raise InvalidServiceError."""
    if not _NAME.fullmatch(name):
        raise InvalidServiceError(
            f"invalid service name {name!r}: use 1-63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return name


def validate_address(address: object) -> str:
    """Return ``address`` if it is a usable address string, else raise InvalidServiceError."""
    if not isinstance(address, str) or not address:
        raise InvalidServiceError("'address' must be a non-empty string, e.g. '10.0.0.7:8080'")
    if len(address) > _MAX_ADDRESS_LENGTH or any(ch.isspace() for ch in address):
        raise InvalidServiceError(
            f"invalid address {address!r}: no whitespace, at most {_MAX_ADDRESS_LENGTH} characters"
        )
    return address


class Registry:
    """Services by name; every method is safe to call from concurrent request threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._addresses: dict[str, str] = {}

    def register(self, name: str, address: str) -> tuple[Service, bool]:
        """Store (or replace) a service; the flag says whether the name was new."""
        service = Service(validate_name(name), validate_address(address))
        with self._lock:
            created = name not in self._addresses
            self._addresses[name] = address
        return service, created

    def deregister(self, name: str) -> bool:
        """Remove a service; False when it was not registered."""
        with self._lock:
            return self._addresses.pop(name, None) is not None

    def get(self, name: str) -> Service | None:
        """The service registered under ``name``, if any."""
        with self._lock:
            address = self._addresses.get(name)
        return None if address is None else Service(name, address)

    def services(self) -> list[Service]:
        """Every registered service, sorted by name so listings are stable."""
        with self._lock:
            items = sorted(self._addresses.items())
        return [Service(name, address) for name, address in items]
