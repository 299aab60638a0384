"""The Remote Execution API (REAPI v2) as a shared cache: its messages and its gRPC client.

shipyard's action key travels as an Action and a Command whose digest is the
ActionCache key (`results`); an action's outputs are an ActionResult's output
files under dist/ whose bytes are CAS blobs (`entries` restores and stores them
through any such store). The gRPC client (`client`) speaks the Capabilities,
ContentAddressableStorage, ActionCache and ByteStream services; the HTTP cache
protocol (`shipyard.engine.cache.http`) stores the same ActionResult.

Nothing here imports gRPC or protobuf until a client is opened (the no-op build
loads none of it); they come with `pip install 'shipyard[remote]'`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from shipyard.errors import UsageError

if TYPE_CHECKING:
    from pathlib import Path

    from shipyard.engine.cache.endpoint import CacheEndpoint, Connection
    from shipyard.engine.cache.reapi.client import GrpcCache

__all__ = ["EXTRA_HINT", "client_certificate", "extra_needed", "open_grpc_cache"]

EXTRA_HINT = "pip install 'shipyard[remote]'"


@contextlib.contextmanager
def extra_needed(url: str, what: str) -> Iterator[None]:
    """Turn an ImportError in the block (the `remote` extra is not installed) into a
    UsageError (exit 2) naming `--cache=url` and the install command."""
    try:
        yield
    except ImportError as exc:
        raise UsageError(
            f"--cache={url}: {what} needs the optional dependencies gRPC and protobuf "
            f"(missing: {exc.name or exc}); install them with {EXTRA_HINT}"
        ) from None


def client_certificate(connection: Connection) -> tuple[Path, Path] | None:
    """The client certificate and its key for mutual TLS, None without one; UsageError
    (exit 2) when only one of the two files is given."""
    cert, key = connection.cert_file, connection.key_file
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise UsageError(
            "a client certificate needs both SHIPYARD_CACHE_CERT and SHIPYARD_CACHE_KEY "
            "(PEM files); set both or neither"
        )
    return cert, key


def open_grpc_cache(endpoint: CacheEndpoint, connection: Connection) -> GrpcCache:
    """The client of the REAPI cache at `endpoint` (grpc:// or grpcs://). Nothing is
    sent yet: the first restore or store (or `writable`) asks the server's
    capabilities, and raises RemoteUnavailable when it does not answer. UsageError
    (exit 2) when the `remote` extra is not installed."""
    with extra_needed(endpoint.url, "the Remote Execution API cache"):
        from shipyard.engine.cache.reapi.client import GrpcCache

    return GrpcCache(endpoint, connection)
