"""Blob uploads to a registry: the session a POST opens, one PUT or PATCH chunks.

An upload opens a session with a POST, or mounts the blob from another repository
of the registry when a source is known, then sends the blob in one PUT or in PATCH
chunks. A failed chunk resumes from what the registry says it holds; any other
failed upload is started again from the beginning by `Registry.push_blob`, once it
has checked that the blob did not land after all. One blob has one retry budget
(`Progress`): its attempts are counted afresh only when the upload gets further than
it ever did (a registry that says it holds less than it confirmed costs an
attempt), and the policy's time cap runs from the blob's first request, so no
registry can keep an upload going forever.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlencode, urljoin, urlsplit, urlunsplit

import requests

from shipyard._http.retry import Backoff
from shipyard.oci.mediatypes import OCTET_STREAM
from shipyard.oci.remote.auth import pull_scope, push_scope
from shipyard.oci.remote.transport import RegistryError, Transport

__all__ = ["Progress", "SessionLost", "Upload", "with_query"]


class Progress:
    """One blob upload's retry budget: attempts renew on progress, a bounded number of times.

    Each chunk the registry confirms beyond what this upload session had renews
    the attempts, so a long upload through a flaky network ends; a session
    started again (the registry lost the upload, or the closing PUT's answer was
    lost) earns renewals again, but only `renewals` in all: three passes over the
    blob's chunks. A registry that keeps losing what it stored therefore spends
    the budget instead of keeping the upload going for ever, and the time cap
    runs from the blob's first request.
    """

    def __init__(self, backoff: Backoff, renewals: int) -> None:
        self.backoff = backoff
        self.session_high = 0
        self.left = renewals

    def new_session(self) -> None:
        """An upload session starts from nothing."""
        self.session_high = 0

    def reached(self, offset: int) -> None:
        """The registry holds `offset` bytes: past this session's best, attempts renew."""
        if offset > self.session_high:
            self.session_high = offset
            if self.left > 0:
                self.left -= 1
                self.backoff.renew()


class SessionLost(RegistryError):
    """The registry no longer knows an upload session after a failed request of it.

    A consequence of the failure already counted against the budget, not a new
    one: the restart is logged and paused like a retry, but its attempt is given
    back, so one fault does not spend two attempts.
    """


class _Slice:
    """`length` bytes of an open file from `offset`, read in blocks by http.client."""

    def __init__(self, handle: IO[bytes], offset: int, length: int, sent: Callable[[int], None]):
        handle.seek(offset)
        self._handle, self._left, self._sent = handle, length, sent

    def __len__(self) -> int:
        return self._left

    def read(self, size: int = -1) -> bytes:
        size = self._left if size < 0 else min(size, self._left)
        data = self._handle.read(size)
        self._left -= len(data)
        self._sent(len(data))
        return data


def with_query(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = "&".join(q for q in (parts.query, urlencode(params)) if q)
    return urlunsplit(parts._replace(query=query))


class Upload:
    """The upload sessions of one blob (`digest`) into `repo` through `transport`; `op`
    names the operation in errors and retry lines."""

    def __init__(self, transport: Transport, repo: str, digest: str, op: str) -> None:
        self._transport = transport
        self._repo, self._digest, self._op = repo, digest, op
        self._scopes = [push_scope(repo)]

    def start(self, mount_from: str | None) -> str | None:
        """POST an upload (or a mount); the upload URL, or None when the blob was mounted."""
        transport, op = self._transport, self._op
        url = transport._url(f"/v2/{self._repo}/blobs/uploads/")
        scopes = list(self._scopes)
        if mount_from is not None:
            url = with_query(url, mount=self._digest, **{"from": mount_from})
            scopes.append(pull_scope(mount_from))
        with transport._send(op, lambda: transport._authorized("POST", url, op, scopes)) as resp:
            location = resp.headers.get("Location")
            if resp.status_code == 201 and mount_from is not None:
                transport._count(blobs_mounted=1)
                return None
            if resp.status_code != 202 or not location:
                raise transport._error(op, resp)
        return urljoin(url, location)

    def whole(self, location: str, size: int, path: Path) -> None:
        """Monolithic: one PUT with the whole blob."""
        sent = functools.partial(self._transport._count, "bytes_uploaded")
        with path.open("rb") as handle:
            body = functools.partial(_Slice, handle, 0, size, sent)
            headers = {"Content-Type": OCTET_STREAM}
            url = with_query(location, digest=self._digest)
            self._expect(201, "PUT", url, headers=headers, body=body)

    def chunks(
        self, location: str, size: int, path: Path, chunk_size: int, progress: Progress
    ) -> None:
        """PATCH chunks, then the closing PUT; a failed request resumes where the registry is.

        The blob's budget (`progress`) is renewed when the registry holds more than
        this session had, a bounded number of times, so a long upload through a
        flaky network still ends, and one whose registry keeps losing what it
        stored spends the budget: a Range that goes back below what was confirmed
        counts as a failed attempt, and the time cap is the blob's.
        """
        transport, op = self._transport, self._op
        sent = functools.partial(transport._count, "bytes_uploaded")
        offset = 0
        progress.new_session()
        with path.open("rb") as handle:
            while True:
                try:
                    if offset >= size:
                        self._expect(201, "PUT", with_query(location, digest=self._digest))
                        return
                    length = min(chunk_size, size - offset)
                    end = offset + length - 1
                    body = functools.partial(_Slice, handle, offset, length, sent)
                    headers = {"Content-Type": OCTET_STREAM, "Content-Range": f"{offset}-{end}"}
                    resp = self._expect(202, "PATCH", location, headers, body)
                    stored = resp.headers.get("Range", f"0-{end}").rpartition("-")[2]
                    if not resp.headers.get("Location") or stored != str(end):
                        detail = f"chunk {offset}-{end} was not stored whole"
                        raise RegistryError(transport.host, op, detail)
                    location = urljoin(location, resp.headers["Location"])
                    offset += length
                    progress.reached(offset)
                except RegistryError as exc:
                    transport._pause_or_raise(op, exc, progress.backoff)
                    location, held = self._offset(location, size)
                    if held < offset:
                        detail = f"the registry holds {held} bytes after confirming {offset}"
                        lost = RegistryError(transport.host, op, detail, transient=True)
                        transport._pause_or_raise(op, lost, progress.backoff)
                    offset = held
                    progress.reached(offset)

    def _offset(self, location: str, size: int) -> tuple[str, int]:
        """Where an interrupted chunked upload stands: its URL and how many bytes it holds.

        An upload the registry no longer knows (it may have been completed by the
        request whose answer was lost) or whose state is unclear is a transient
        error, so the caller checks for the blob and else starts again.
        """
        transport, op = self._transport, self._op
        attempt = functools.partial(transport._authorized, "GET", location, op, self._scopes)
        with transport._send(op, attempt) as resp:
            end = resp.headers.get("Range", "").rpartition("-")[2]
            moved = resp.headers.get("Location")
            # "0-0" is what a registry says for both 0 and 1 bytes held: start again.
            held = int(end) + 1 if end.isdigit() and end != "0" else 0
            if resp.status_code not in (200, 204) or not 0 < held <= size:
                detail = f"the upload session answered HTTP {resp.status_code}, Range {end!r}"
                raise SessionLost(transport.host, op, detail + "; starting again", transient=True)
        return (urljoin(location, moved) if moved else location), held

    def _expect(
        self,
        status: int,
        method: str,
        url: str,
        headers: Mapping[str, str] | None = None,
        body: Callable[[], Any] | None = None,
    ) -> requests.Response:
        """One request of an upload session (never retried alone), which must answer `status`."""
        transport, op = self._transport, self._op
        attempt = functools.partial(
            transport._authorized, method, url, op, self._scopes, headers, body
        )
        with transport._send(op, attempt, retry=False) as resp:
            if resp.status_code != status:
                raise transport._error(op, resp)
        return resp
