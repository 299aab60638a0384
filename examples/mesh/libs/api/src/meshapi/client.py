"""A typed HTTP client for the mesh-discovery API."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from meshapi.model import SERVICES_PATH, InvalidServiceError, Service, service_path

__all__ = [
    "DiscoveryClient",
    "DiscoveryError",
    "DiscoveryProtocolError",
    "DiscoveryRequestError",
    "DiscoveryUnreachableError",
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
        return _service(self._call("PUT", service_path(name), {"address": address}))

    def get(self, name: str) -> Service:
        """The service registered as ``name``; DiscoveryRequestError 404 if there is none."""
        return _service(self._call("GET", service_path(name)))

    def services(self) -> list[Service]:
        """Every registered service, in the server's (name) order."""
        listing = self._call("GET", SERVICES_PATH)
        if not isinstance(listing, list):
            raise DiscoveryProtocolError(f"expected a JSON list of services, got {listing!r}")
        return [_service(entry) for entry in listing]

    def deregister(self, name: str) -> None:
        """Remove ``name``; DiscoveryRequestError with status 404 if it was not registered."""
        self._call("DELETE", service_path(name))

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


def _service(data: Any) -> Service:
    try:
        return Service.from_json(data)
    except InvalidServiceError as exc:
        raise DiscoveryProtocolError(f"unexpected service entry from discovery: {data!r}") from exc


def _error_message(error: urllib.error.HTTPError) -> str:
    """The server's ``{"error": ...}`` text, or the HTTP reason when there is none."""
    try:
        payload = json.load(error)
    except (OSError, ValueError):
        payload = None
    if isinstance(payload, dict) and isinstance(payload.get("error"), str):
        return str(payload["error"])
    return f"HTTP {error.code} {error.reason}"
