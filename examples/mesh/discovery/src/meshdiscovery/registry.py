"""The service registry: a thread-safe map from service name to address."""

from __future__ import annotations

import threading

from meshapi import Service

__all__ = ["Registry"]


class Registry:
    """Services by name; every method is safe to call from concurrent request threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._addresses: dict[str, str] = {}

    def register(self, name: str, address: str) -> tuple[Service, bool]:
        """Store (or replace) a service; the flag says whether the name was new.

        Raises meshapi.InvalidServiceError for a name or address the API refuses."""
        service = Service.checked(name, address)
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
