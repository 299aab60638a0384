"""The HTTP cache protocol as bazel-remote serves it: `/ac/<key>` and `/cas/<sha256>`.

GET reads, HEAD asks whether a blob is there, PUT writes; 404 is a miss. An
action's entry under /ac/ is the Remote Execution API ActionResult (serialized
protobuf), keyed by the same Action digest as over gRPC, so bazel-remote's default
validation of /ac/ uploads accepts it and one server can serve both protocols;
that is why this client also needs the `remote` extra (protobuf). Plain WebDAV
servers (nginx with `dav_methods PUT`) serve it too, and check nothing: every blob
is checked against its digest as a restore puts it in place
(`shipyard.engine.cache.reapi.entries`).

Requests go through shipyard's HTTP layer (`shipyard._http`): TLS against the
connection's CA or the system's, a client certificate when given, the
connection's headers (a bearer token, an API key) and Basic credentials, a
timeout per request and a bounded, quiet retry of transient faults (no answer,
429, 5xx: logged at DEBUG, never a warning per retry); until the server has
answered once, calls are brief (`shipyard.engine.cache.patience`). Once the
retries are spent, or on an answer that is not a hit, a miss or a success, the
call raises RemoteUnavailable and the build goes on without the cache.
A PUT answered 401, 403 or 405 (a server that serves reads only, or credentials
that may only read) makes the cache read-only: `writable` turns False and nothing
more is sent up.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import requests

from shipyard._http.errors import RemoteError
from shipyard._http.transport import Client
from shipyard.engine.cache.endpoint import (
    CacheEndpoint,
    Connection,
    RemoteStats,
    RemoteUnavailable,
)
from shipyard.engine.cache.patience import Patience, first_contact
from shipyard.engine.cache.reapi import client_certificate
from shipyard.engine.cache.reapi.entries import Blob, ResultStore, WritesRefused
from shipyard.engine.cache.reapi.results import parsed_result
from shipyard.engine.cache.reapi.stubs import re_pb2

__all__ = ["HttpCache", "open_http_cache"]

_MAX_RESULT = 16 << 20
_OK = (200, 201, 204)
_REFUSED = (401, 403, 405)  # a PUT the server will not take: read-only, or credentials


def open_http_cache(endpoint: CacheEndpoint, connection: Connection) -> HttpCache:
    """The client of the HTTP cache at `endpoint` (http:// or https://)."""
    return HttpCache(endpoint, connection)


class HttpCache(ResultStore):
    """An OutputCache on an HTTP cache server (bazel-remote, nginx WebDAV, ...)."""

    def __init__(self, endpoint: CacheEndpoint, connection: Connection) -> None:
        super().__init__()
        self.where = endpoint.url
        self.stats = RemoteStats()
        prefix = f"/{endpoint.path}" if endpoint.path else ""
        self.base = f"{endpoint.scheme}://{endpoint.host}{prefix}"
        self._headers = dict(connection.headers)
        self._auth = connection.basic
        session = requests.Session()
        pair = client_certificate(connection)
        if pair is not None:
            session.cert = (str(pair[0]), str(pair[1]))
        patience = Patience(connection)
        timeout, retry = first_contact(connection)
        self._client = Client(
            endpoint.host,
            where=endpoint.url,
            server="the cache",
            scheme=endpoint.scheme,
            insecure=endpoint.scheme == "http",  # the URL says plain HTTP
            ca_file=connection.ca_file,
            trust_hint="give its CA as a PEM file in SHIPYARD_CACHE_CA",
            timeout=timeout,
            retry=retry,
            session=session,
            on_request=self._counted,
        )
        self._patience = patience
        patience.attach(self._client)

    def close(self) -> None:
        """Close the pooled connections."""
        self._client.close()

    def _counted(self, method: str, path: str, status: int | None) -> None:
        self.count(calls=1)
        self._patience(method, path, status)

    # ResultStore's moves ----------------------------------------------------

    def get_result(self, action: re_pb2.Digest) -> re_pb2.ActionResult | None:
        """GET /ac/<hash>: None on 404; RefusedEntry when the body is no ActionResult."""
        op = "read an action result"
        with self._request("GET", f"ac/{action.hash}", op, stream=True) as resp:
            if resp.status_code == 404:
                return None
            self._expect(op, resp)
            data = self._read(op, resp, _MAX_RESULT)
        self.count(bytes_down=len(data))
        return parsed_result(data)

    def put_result(self, action: re_pb2.Digest, result: re_pb2.ActionResult) -> None:
        """PUT /ac/<hash>."""
        data = result.SerializeToString()
        op = "write an action result"
        with self._request("PUT", f"ac/{action.hash}", op, body=lambda: data) as resp:
            self._expect_written(op, resp)
        self.count(bytes_up=len(data))

    def missing(self, digests: Sequence[re_pb2.Digest]) -> set[str]:
        """HEAD /cas/<hash> for each: the ones answered 404."""
        found: set[str] = set()
        op = "look for a blob"
        for digest in digests:
            with self._request("HEAD", f"cas/{digest.hash}", op) as resp:
                if resp.status_code == 404:
                    found.add(digest.hash)
                else:
                    self._expect(op, resp)
        return found

    def upload(self, blobs: Sequence[Blob]) -> None:
        """PUT /cas/<hash> for each, streamed from its file."""
        op = "write a blob"
        for digest, source in blobs:
            handle = io.BytesIO(source) if isinstance(source, bytes) else source.open("rb")
            with (
                handle,
                self._request("PUT", f"cas/{digest.hash}", op, body=_rewound(handle)) as resp,
            ):
                self._expect_written(op, resp)
            self.count(bytes_up=digest.size_bytes)

    def download(self, digests: Sequence[re_pb2.Digest], folder: Path) -> bool:
        """GET /cas/<hash> for each into `folder`, at most one byte more than its size
        (a longer body fails the check as it is put in place)."""
        op = "read a blob"
        for digest in digests:
            with self._request("GET", f"cas/{digest.hash}", op, stream=True) as resp:
                if resp.status_code == 404:
                    return False
                self._expect(op, resp)
                limit, total = digest.size_bytes + 1, 0
                with (folder / digest.hash).open("wb") as out:
                    try:
                        for chunk in self._client.iter_body(op, resp):
                            out.write(chunk[: limit - total])
                            total += len(chunk)
                            if total >= limit:
                                break
                    except RemoteError as exc:
                        raise RemoteUnavailable(str(exc)) from exc
                self.count(bytes_down=min(total, limit))
        return True

    # The requests ------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        op: str,
        *,
        body: Callable[[], Any] | None = None,
        stream: bool = False,
    ) -> requests.Response:
        """One request to `base`/`path`, retried within the budget; RemoteUnavailable
        once it is spent or on a refusal of the connection itself."""
        url = f"{self.base}/{path}"
        try:
            return self._client.send(
                op,
                lambda: self._client.exchange(
                    method,
                    url,
                    op,
                    headers=self._headers,
                    body=body,
                    auth=self._auth,
                    stream=stream,
                ),
            )
        except RemoteError as exc:
            raise RemoteUnavailable(str(exc)) from exc

    def _expect(self, op: str, resp: requests.Response) -> None:
        """Nothing for a success; RemoteUnavailable naming the status otherwise."""
        if resp.status_code in _OK:
            return
        hint = ""
        if resp.status_code in (401, 403):
            hint = (
                "; give the credentials the cache wants in SHIPYARD_CACHE_TOKEN, "
                "SHIPYARD_CACHE_HEADERS or SHIPYARD_CACHE_USER/SHIPYARD_CACHE_PASSWORD"
            )
        raise RemoteUnavailable(f"{self.where}: {op}: HTTP {resp.status_code}{hint}")

    def _expect_written(self, op: str, resp: requests.Response) -> None:
        """Nothing for a success; WritesRefused when the server answers a PUT with
        401, 403 or 405 (it serves reads only, or these credentials may only read):
        the cache is then read and never written, with one note."""
        if resp.status_code in _REFUSED:
            self.refuse_writes()
            raise WritesRefused(f"{self.where}: {op}: HTTP {resp.status_code}")
        self._expect(op, resp)

    def _read(self, op: str, resp: requests.Response, limit: int) -> bytes:
        try:
            return self._client.read_body(op, resp, limit)
        except RemoteError as exc:
            raise RemoteUnavailable(str(exc)) from exc


def _rewound(handle: IO[bytes]) -> Callable[[], IO[bytes]]:
    """A body maker for `Client.exchange`: the file from its start, for each try."""

    def body() -> IO[bytes]:
        handle.seek(0)
        return handle

    return body
