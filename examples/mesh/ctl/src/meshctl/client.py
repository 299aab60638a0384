"""A typed HTTP client for the mesh-discovery API."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

__all__ = [
    "DiscoveryClient",
    "DiscoveryError",
    "DiscoveryProtocolError",
    "DiscoveryRequestError",
    "DiscoveryUnreachableError",
    "Service",
]


class DiscoveryError(Exception):
    """Base class for everything that can go wrong talking to mesh-discovery."""


class DiscoveryUnreachableError(DiscoveryError):
    """No HTTP answer at all: the server is down, the port is wrong or the URL is bad."""

    def __init__(self, url: str, reason: object) -> None:
        super().__init__(
            f"cannot reach mesh-discovery at {url} ({reason}); "
            "is it running? set --discovery or MESH_DISCOVERY"
        )
        self.url = url
        self.reason = reason


class DiscoveryRequestError(DiscoveryError):
    """mesh-discovery answered with an error status, e.g. 400 for a bad name or 404."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class DiscoveryProtocolError(DiscoveryError):
    """Something answered, but not the way mesh-discovery does (wrong port or URL?)."""


@dataclass(frozen=True)
class Service:
    """One registered service as mesh-discovery reports it."""

    name: str
    address: str

    @classmethod
    def from_json(cls, data: Any) -> Service:
        """Build from the API's ``{"name": ..., "address": ...}`` object."""
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("name"), str)
            or not isinstance(data.get("address"), str)
        ):
            raise DiscoveryProtocolError(f"unexpected service entry from discovery: {data!r}")
        return cls(name=data["name"], address=data["address"])


class DiscoveryClient:
    """Calls one mesh-discovery server; every method raises a DiscoveryError on failure."""

    def __init__(self, base_url: str, timeout: float = 5.0) -> None:
        if urlsplit(base_url).scheme not in ("http", "https"):
            raise DiscoveryError(f"discovery URL {base_url!r} must start with http:// or https://")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        # Discovery lives inside the mesh, so an HTTP(S)_PROXY meant for the internet
        # must not capture these requests.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def register(self, name: str, address: str) -> Service:
        """Register ``name`` at ``address``, replacing any previous address."""
        return Service.from_json(self._call("PUT", _service_path(name), {"address": address}))

    def services(self) -> list[Service]:
        """Every registered service, in the server's (name) order."""
        listing = self._call("GET", "/v1/services")
        if not isinstance(listing, list):
            raise DiscoveryProtocolError(f"expected a JSON list of services, got {listing!r}")
        return [Service.from_json(entry) for entry in listing]

    def deregister(self, name: str) -> None:
        """Remove ``name``; DiscoveryRequestError with status 404 if it was not registered."""
        self._call("DELETE", _service_path(name))

    def _call(self, method: str, path: str, body: object = None) -> Any:
        url = self.base_url + path
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise DiscoveryRequestError(exc.code, _error_message(exc)) from exc
        except urllib.error.URLError as exc:
            raise DiscoveryUnreachableError(self.base_url, exc.reason) from exc
        except OSError as exc:  # a timeout or reset after the connection was made
            raise DiscoveryUnreachableError(self.base_url, exc) from exc
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise DiscoveryProtocolError(f"{url} did not answer with JSON: {exc}") from exc


def _service_path(name: str) -> str:
    # Quote everything so a name like "a/b" reaches the server (and its validation) intact.
    return "/v1/services/" + quote(name, safe="")


def _error_message(error: urllib.error.HTTPError) -> str:
    """The server's ``{"error": ...}`` text, or the HTTP reason when there is none."""
    try:
        payload = json.load(error)
    except (OSError, ValueError):
        payload = None
    if isinstance(payload, dict) and isinstance(payload.get("error"), str):
        return str(payload["error"])
    return f"HTTP {error.code} {error.reason}"
