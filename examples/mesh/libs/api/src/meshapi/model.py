"""The records of the mesh-discovery API and the rules for what a valid one holds.

mesh-discovery validates with these rules before storing a service; meshctl reads the
same records back. Both import them from here, so client and server cannot drift apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

__all__ = [
    "DEFAULT_PORT",
    "SERVICES_PATH",
    "InvalidServiceError",
    "Service",
    "service_path",
    "validate_address",
    "validate_name",
]

DEFAULT_PORT = 15010
"""Where mesh-discovery listens unless told otherwise (Istio's pilot-discovery port)."""
SERVICES_PATH = "/v1/services"
"""The collection of services; ``SERVICES_PATH/<name>`` is one of them."""

# A DNS label (RFC 1123), so that a registered name can double as a hostname in the mesh.
_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
# The longest DNS name plus ":65535"; anything longer is a client bug, not an address.
_MAX_ADDRESS_LENGTH = 253 + 6


class InvalidServiceError(ValueError):
    """A service name, address or record that the API does not accept."""


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


def service_path(name: str) -> str:
    """The URL path of service ``name``, every character quoted.

    Quoting everything lets a name like ``a/b`` reach the server (and its validation) intact."""
    return f"{SERVICES_PATH}/{quote(name, safe='')}"


@dataclass(frozen=True)
class Service:
    """One registered service: its name and the address it is reached at."""

    name: str
    address: str

    @classmethod
    def checked(cls, name: str, address: object) -> Service:
        """A service whose name and address pass validation, else InvalidServiceError."""
        return cls(validate_name(name), validate_address(address))

    @classmethod
    def from_json(cls, data: Any) -> Service:
        """Read the API's ``{"name": ..., "address": ...}`` object (shape only, not rules)."""
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("name"), str)
            or not isinstance(data.get("address"), str)
        ):
            raise InvalidServiceError(f"not a service record: {data!r}")
        return cls(name=data["name"], address=data["address"])

    def to_json(self) -> dict[str, str]:
        """The JSON object the HTTP API uses for this service."""
        return {"name": self.name, "address": self.address}
