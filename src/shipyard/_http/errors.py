"""The typed errors of an HTTP operation, shared by the registry and package-index clients.

`RemoteError` says where (a host or an index URL), which operation, and what went
wrong, never a secret; `transient` marks a fault a later attempt may cure, which
`retry.Retrier` retries. The registry client calls it `RegistryError`.
"""

from __future__ import annotations

from collections.abc import Sequence

from shipyard.errors import ShipyardError

__all__ = ["CertificateError", "PlainHTTPRefused", "RemoteError", "UnsafeURL"]


class RemoteError(ShipyardError):
    """A remote operation failed; the message names the server and the operation (exit 1)."""

    def __init__(
        self,
        where: str,
        operation: str,
        detail: str,
        *,
        status: int | None = None,
        codes: Sequence[str] = (),
        transient: bool = False,
        retry_after: float | None = None,
    ) -> None:
        self.registry = self.where = where
        self.operation = operation
        self.status = status
        self.codes = tuple(codes)
        self.transient = transient
        self.retry_after = retry_after
        self.detail = detail
        super().__init__(": ".join(part for part in (where, operation, detail) if part))


class CertificateError(RemoteError):
    """The server's TLS certificate is not trusted; says how to add the CA (exit 2)."""

    exit_code = 2


class PlainHTTPRefused(RemoteError):
    """A plain-HTTP URL on a host off loopback, not allowed; nothing was sent (exit 2)."""

    exit_code = 2


class UnsafeURL(RemoteError):
    """A URL whose host two URL parsers could read differently; nothing was sent (exit 2)."""

    exit_code = 2
