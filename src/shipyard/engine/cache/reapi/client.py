"""The gRPC client of a Remote Execution API cache (BuildGrid, Buildbarn, BuildBuddy, ...).

Capabilities come first (asked by the first call, never by opening the client):
the server must offer SHA256 digests; its largest batch sets which blobs go in
BatchUpdateBlobs/BatchReadBlobs and which through ByteStream (resource names carry
the instance); whether it takes ActionCache updates is `writable`. Every call has
a deadline (`Connection.timeout`; the first, the capabilities, shares
`Connection.connect_timeout` with its retries) and is tried again, quietly and a
bounded number of times (`Connection.retries`), when the server is unavailable,
late or busy; after that, or on any other error but NOT_FOUND, the call raises
RemoteUnavailable and the build goes on without the cache. The headers of the
connection (a bearer token, an API key, Basic credentials) go with every call as
metadata; grpcs:// verifies the server against the connection's CA (else the
system's) and presents its client certificate if it has one.
"""

from __future__ import annotations

import base64
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import grpc
from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2_grpc as re_grpc,
)
from buildgrid.common.protos.google.bytestream import bytestream_pb2_grpc as bs_grpc

from shipyard.engine.cache.endpoint import (
    CacheEndpoint,
    Connection,
    RemoteStats,
    RemoteUnavailable,
)
from shipyard.engine.cache.reapi import client_certificate
from shipyard.engine.cache.reapi.entries import Blob, ResultStore
from shipyard.engine.cache.reapi.stubs import bs_pb2, re_pb2

__all__ = ["GrpcCache"]

_T = TypeVar("_T")
_RETRIED = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
    }
)
_AUTH = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})
_MAX_MESSAGE = 64 << 20  # what this client accepts in one message
_BATCH = 4 << 20  # gRPC's default message limit: batches stay under it, whatever a server says
_OVERHEAD = 64 << 10  # room in a batch for the messages around the blobs
_CHUNK = 1 << 20  # ByteStream write chunk
_STREAM_RATE = 8 << 20  # bytes per second a stream is given on top of its deadline
_SHA256 = re_pb2.DigestFunction.SHA256


class _NotFound(Exception):
    """The server answered NOT_FOUND."""


class GrpcCache(ResultStore):
    """An OutputCache in a REAPI server's ActionCache and CAS (one instance)."""

    def __init__(self, endpoint: CacheEndpoint, connection: Connection) -> None:
        super().__init__()
        self.endpoint = endpoint
        self.connection = connection
        self.instance = endpoint.path
        self.where = endpoint.url
        self.stats = RemoteStats()
        self._metadata = _metadata(connection)
        self._channel = _channel(endpoint, connection)
        self._capabilities = re_grpc.CapabilitiesStub(self._channel)
        self._cas = re_grpc.ContentAddressableStorageStub(self._channel)
        self._ac = re_grpc.ActionCacheStub(self._channel)
        self._bytestream = bs_grpc.ByteStreamStub(self._channel)
        self._asking = threading.Lock()
        self._known: re_pb2.CacheCapabilities | None = None
        self._unreachable: str | None = None  # why the capabilities could not be had

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()

    @property
    def writable(self) -> bool:
        """Whether the server takes ActionCache updates (its capabilities say)."""
        updates = self.capabilities().action_cache_update_capabilities.update_enabled
        return updates and not self._refused

    @property
    def batch_limit(self) -> int:
        """The largest total of blob bytes in one batch request: the server's limit (at
        most gRPC's default message size), less room for the messages around them."""
        limit = self.capabilities().max_batch_total_size_bytes
        return (min(limit, _BATCH) if limit > 0 else _BATCH) - _OVERHEAD

    def capabilities(self) -> re_pb2.CacheCapabilities:
        """The server's cache capabilities, asked by the first call that needs them
        (opening a client sends nothing). SHA256 is required: a server without it
        cannot hold shipyard's digests (RemoteUnavailable). A failure is remembered:
        the threads that waited for it get it at once instead of asking again."""
        with self._asking:
            if self._unreachable is not None:
                raise RemoteUnavailable(self._unreachable)
            if self._known is None:
                try:
                    self._known = self._ask_capabilities()
                except RemoteUnavailable as exc:
                    self._unreachable = str(exc)
                    raise
            return self._known

    def _ask_capabilities(self) -> re_pb2.CacheCapabilities:
        request = re_pb2.GetCapabilitiesRequest(instance_name=self.instance)
        found = self._call(
            "GetCapabilities",
            lambda timeout: self._capabilities.GetCapabilities(
                request, timeout=timeout, metadata=self._metadata
            ),
            budget=self.connection.connect_timeout,  # the first call: brief (see `_call`)
        )
        caps = found.cache_capabilities
        if caps.digest_function and _SHA256 not in caps.digest_function:
            offered = ", ".join(re_pb2.DigestFunction.Value.Name(d) for d in caps.digest_function)
            raise RemoteUnavailable(
                f"{self.where}: the cache offers the digest functions {offered}, not SHA256"
            )
        return caps

    # ResultStore's moves ----------------------------------------------------

    def get_result(self, action: re_pb2.Digest) -> re_pb2.ActionResult | None:
        """GetActionResult; None on NOT_FOUND."""
        self.capabilities()
        request = re_pb2.GetActionResultRequest(
            instance_name=self.instance, action_digest=action, inline_stdout=False
        )
        try:
            result = self._call(
                "GetActionResult",
                lambda timeout: self._ac.GetActionResult(
                    request, timeout=timeout, metadata=self._metadata
                ),
            )
        except _NotFound:
            return None
        self.count(bytes_down=result.ByteSize())
        return result

    def put_result(self, action: re_pb2.Digest, result: re_pb2.ActionResult) -> None:
        """UpdateActionResult."""
        request = re_pb2.UpdateActionResultRequest(
            instance_name=self.instance, action_digest=action, action_result=result
        )
        self._call(
            "UpdateActionResult",
            lambda timeout: self._ac.UpdateActionResult(
                request, timeout=timeout, metadata=self._metadata
            ),
        )
        self.count(bytes_up=result.ByteSize())

    def missing(self, digests: Sequence[re_pb2.Digest]) -> set[str]:
        """FindMissingBlobs."""
        self.capabilities()
        request = re_pb2.FindMissingBlobsRequest(
            instance_name=self.instance, blob_digests=list(digests)
        )
        found = self._call(
            "FindMissingBlobs",
            lambda timeout: self._cas.FindMissingBlobs(
                request, timeout=timeout, metadata=self._metadata
            ),
        )
        return {digest.hash for digest in found.missing_blob_digests}

    def upload(self, blobs: Sequence[Blob]) -> None:
        """Small blobs in BatchUpdateBlobs requests, large ones through ByteStream Write."""
        limit = self.batch_limit
        small = [blob for blob in blobs if blob[0].size_bytes <= limit]
        for batch in _batches(small, limit):
            self._batch_update(batch)
        for digest, source in blobs:
            if digest.size_bytes > limit:
                self._write(digest, source)

    def download(self, digests: Sequence[re_pb2.Digest], folder: Path) -> bool:
        """Small blobs by BatchReadBlobs, large ones by ByteStream Read."""
        limit = self.batch_limit
        small = [(d, Path()) for d in digests if d.size_bytes <= limit]
        for batch in _batches(small, limit):
            if not self._batch_read([digest for digest, _ in batch], folder):
                return False
        for digest in digests:
            if digest.size_bytes > limit:
                try:
                    self._read(digest, folder / digest.hash)
                except _NotFound:
                    return False
        return True

    # The calls ---------------------------------------------------------------

    def _batch_update(self, batch: Sequence[Blob]) -> None:
        requests = [
            re_pb2.BatchUpdateBlobsRequest.Request(digest=digest, data=_bytes(source))
            for digest, source in batch
        ]
        request = re_pb2.BatchUpdateBlobsRequest(instance_name=self.instance, requests=requests)
        found = self._call(
            "BatchUpdateBlobs",
            lambda timeout: self._cas.BatchUpdateBlobs(
                request, timeout=timeout, metadata=self._metadata
            ),
        )
        for answer in found.responses:
            if answer.status.code != 0:
                raise RemoteUnavailable(
                    f"{self.where}: BatchUpdateBlobs: blob {answer.digest.hash} was refused "
                    f"(code {answer.status.code}: {answer.status.message})"
                )
        self.count(bytes_up=sum(len(r.data) for r in requests))

    def _batch_read(self, digests: Sequence[re_pb2.Digest], folder: Path) -> bool:
        request = re_pb2.BatchReadBlobsRequest(instance_name=self.instance, digests=digests)
        found = self._call(
            "BatchReadBlobs",
            lambda timeout: self._cas.BatchReadBlobs(
                request, timeout=timeout, metadata=self._metadata
            ),
        )
        answers = {answer.digest.hash: answer for answer in found.responses}
        for digest in digests:
            answer = answers.get(digest.hash)
            if answer is None or answer.status.code == grpc.StatusCode.NOT_FOUND.value[0]:
                return False
            if answer.status.code != 0:
                raise RemoteUnavailable(
                    f"{self.where}: BatchReadBlobs: blob {digest.hash} could not be read "
                    f"(code {answer.status.code}: {answer.status.message})"
                )
            (folder / digest.hash).write_bytes(answer.data)  # checked as it is put in place
            self.count(bytes_down=len(answer.data))
        return True

    def _resource(self, digest: re_pb2.Digest, upload: bool = False) -> str:
        prefix = f"{self.instance}/" if self.instance else ""
        if upload:
            prefix += f"uploads/{uuid.uuid4()}/"
        return f"{prefix}blobs/{digest.hash}/{digest.size_bytes}"

    def _read(self, digest: re_pb2.Digest, target: Path) -> None:
        """ByteStream Read into `target`, at most one byte more than the digest's size
        (so a longer blob is caught by the check, never written in full)."""
        request = bs_pb2.ReadRequest(resource_name=self._resource(digest))

        def attempt(timeout: float) -> int:
            total = 0
            with target.open("wb") as out:
                for answer in self._bytestream.Read(
                    request, timeout=timeout, metadata=self._metadata
                ):
                    out.write(answer.data[: digest.size_bytes + 1 - total])
                    total += len(answer.data)
                    if total > digest.size_bytes:
                        break
            return min(total, digest.size_bytes + 1)

        self.count(bytes_down=self._call("ByteStream.Read", attempt, digest.size_bytes))

    def _write(self, digest: re_pb2.Digest, source: bytes | Path) -> None:
        """ByteStream Write of one blob, in chunks."""
        resource = self._resource(digest, upload=True)

        def chunks() -> Iterator[bs_pb2.WriteRequest]:
            offset = 0
            with _opened(source) as read:
                while True:
                    data = read(_CHUNK)
                    last = offset + len(data) >= digest.size_bytes
                    yield bs_pb2.WriteRequest(
                        resource_name=resource if offset == 0 else "",
                        write_offset=offset,
                        data=data,
                        finish_write=last,
                    )
                    offset += len(data)
                    if last or not data:
                        return

        self._call(
            "ByteStream.Write",
            lambda timeout: self._bytestream.Write(
                chunks(), timeout=timeout, metadata=self._metadata
            ),
            digest.size_bytes,
        )
        self.count(bytes_up=digest.size_bytes)

    def _call(
        self,
        op: str,
        attempt: Callable[[float], _T],
        size: int = 0,
        *,
        budget: float | None = None,
    ) -> _T:
        """`attempt(deadline)`, tried again on UNAVAILABLE, DEADLINE_EXCEEDED,
        RESOURCE_EXHAUSTED and ABORTED up to `retries` times (quietly: the cache's one
        warning says what a failure means); _NotFound on NOT_FOUND, RemoteUnavailable
        on anything else or once the tries are spent. With `budget` (the first call,
        before the server has answered) all tries together take at most that long, so
        a server that never answers costs seconds, not `retries + 1` time-outs."""
        timeout = self.connection.timeout + size / _STREAM_RATE
        tries = self.connection.retries + 1
        started = time.monotonic()
        for tried in range(1, tries + 1):
            wait = timeout
            if budget is not None:
                wait = min(timeout, budget - (time.monotonic() - started))
            self.count(calls=1)
            try:
                return attempt(wait)
            except grpc.RpcError as exc:
                code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
                if code == grpc.StatusCode.NOT_FOUND:
                    raise _NotFound(op) from None
                pause = min(2.0, 0.2 * 2 ** (tried - 1)) * random.uniform(0.5, 1.0)
                spent = budget is not None and time.monotonic() - started + pause >= budget
                if code not in _RETRIED or tried == tries or spent:
                    raise self._unavailable(op, exc, code, tried, wait) from None
            time.sleep(pause)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _unavailable(
        self, op: str, exc: grpc.RpcError, code: grpc.StatusCode, tried: int, wait: float
    ) -> RemoteUnavailable:
        details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            details = f"timed out after {wait:.3g} s: {details}"
        hint = ""
        if code in _AUTH:
            hint = (
                "; give the credentials the cache wants in SHIPYARD_CACHE_TOKEN or "
                "SHIPYARD_CACHE_HEADERS (e.g. x-buildbuddy-api-key=KEY)"
            )
        attempts = f" after {tried} attempts" if tried > 1 else ""
        return RemoteUnavailable(f"{self.where}: {op}: {code.name} ({details}){attempts}{hint}")


def _batches(
    blobs: Sequence[tuple[re_pb2.Digest, _T]], limit: int
) -> Iterator[list[tuple[re_pb2.Digest, _T]]]:
    """`blobs` in groups whose sizes add up to at most `limit` each."""
    batch: list[tuple[re_pb2.Digest, _T]] = []
    total = 0
    for blob in blobs:
        if batch and total + blob[0].size_bytes > limit:
            yield batch
            batch, total = [], 0
        batch.append(blob)
        total += blob[0].size_bytes
    if batch:
        yield batch


def _bytes(source: bytes | Path) -> bytes:
    return source if isinstance(source, bytes) else source.read_bytes()


class _opened:
    """A `read(n)` over bytes or a file, closed at the end of the block."""

    def __init__(self, source: bytes | Path) -> None:
        self._source = source
        self._handle = None if isinstance(source, bytes) else source.open("rb")
        self._offset = 0

    def __enter__(self) -> Callable[[int], bytes]:
        return self._read

    def __exit__(self, *_: object) -> None:
        if self._handle is not None:
            self._handle.close()

    def _read(self, size: int) -> bytes:
        if self._handle is not None:
            return self._handle.read(size)
        assert isinstance(self._source, bytes)
        data = self._source[self._offset : self._offset + size]
        self._offset += len(data)
        return data


def _metadata(connection: Connection) -> tuple[tuple[str, str], ...]:
    """The connection's headers as call metadata, Basic credentials included."""
    headers = list(connection.headers)
    if connection.basic is not None:
        pair = ":".join(connection.basic).encode()
        headers.append(("authorization", f"Basic {base64.b64encode(pair).decode()}"))
    return tuple(headers)


def _channel(endpoint: CacheEndpoint, connection: Connection) -> grpc.Channel:
    """A channel to the endpoint: plain for grpc://, TLS for grpcs:// (the connection's
    CA, else the system's; its client certificate, if any)."""
    options = [
        ("grpc.max_receive_message_length", _MAX_MESSAGE),
        ("grpc.max_send_message_length", _MAX_MESSAGE),
        ("grpc.enable_retries", 0),  # retried here, counted and bounded
    ]
    if not endpoint.tls:
        return grpc.insecure_channel(endpoint.host, options=options)
    pair = client_certificate(connection)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=connection.ca_file.read_bytes() if connection.ca_file else None,
        private_key=pair[1].read_bytes() if pair else None,
        certificate_chain=pair[0].read_bytes() if pair else None,
    )
    return grpc.secure_channel(endpoint.host, credentials, options=options)
