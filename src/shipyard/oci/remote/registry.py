"""A client for one OCI distribution registry: blobs and manifests, pushed and pulled.

Blobs stream from and to disk: an upload checks for the blob first, tries a
cross-repository mount when a source repository is known, and goes up in one PUT
or in PATCH chunks. A failed chunk resumes from what the registry says it holds;
any other failed upload checks whether the blob landed after all, then starts
again from the beginning. One blob has one retry budget: its attempts are counted
afresh only when the upload gets further than it ever did (a registry that says
it holds less than it confirmed costs an attempt), and the policy's time cap runs
from the blob's first request, so no registry can keep an upload going forever.
Downloads are verified against their length and digest and land atomically; one
cut short is fetched again. Manifests are pushed by digest first; tags are moved
last by the caller. Authentication, TLS, retries and the
typed errors live in `shipyard.oci.remote.transport`. A Registry is safe to share between threads.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlencode, urljoin, urlsplit, urlunsplit

import requests

from shipyard import _json
from shipyard._http.retry import Backoff
from shipyard._http.transport import failure_reason

# Both families' types live in shipyard.oci.mediatypes; these names are kept for callers.
from shipyard.oci.mediatypes import DOCKER_LIST as MEDIA_DOCKER_LIST
from shipyard.oci.mediatypes import DOCKER_MANIFEST as MEDIA_DOCKER_MANIFEST
from shipyard.oci.mediatypes import MANIFEST_TYPES as MANIFEST_MEDIA_TYPES
from shipyard.oci.mediatypes import OCI_INDEX as MEDIA_OCI_INDEX
from shipyard.oci.mediatypes import OCI_MANIFEST as MEDIA_OCI_MANIFEST
from shipyard.oci.mediatypes import OCTET_STREAM as _OCTETS
from shipyard.oci.remote.reference import (
    is_digest,
    validate_digest,
    validate_repository,
    validate_tag,
)
from shipyard.oci.remote.transport import (
    DEFAULT_CERTS_DIRS,
    AuthError,
    CertificateError,
    NotFound,
    RegistryError,
    RegistryStats,
    Transport,
)

__all__ = [
    "DEFAULT_CERTS_DIRS",
    "MANIFEST_MEDIA_TYPES",
    "MEDIA_DOCKER_LIST",
    "MEDIA_DOCKER_MANIFEST",
    "MEDIA_OCI_INDEX",
    "MEDIA_OCI_MANIFEST",
    "AuthError",
    "CertificateError",
    "NotFound",
    "Registry",
    "RegistryError",
    "RegistryStats",
]

_MAX_MANIFEST = 4 << 20  # the size registries are required to accept
_MAX_PAGES = 1000


class _Progress:
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


class _SessionLost(RegistryError):
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


def _with_query(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = "&".join(q for q in (parts.query, urlencode(params)) if q)
    return urlunsplit(parts._replace(query=query))


def _hash(algorithm: str, data: bytes) -> str:
    return f"{algorithm}:{hashlib.new(algorithm, data).hexdigest()}"


def _pull(repo: str) -> str:
    return f"repository:{repo}:pull"


def _push(repo: str) -> str:
    return f"repository:{repo}:pull,push"


class Registry(Transport):
    """A client for the OCI registry at `host` (`host[:port]`, optionally `http(s)://`).

    Options (all keywords): `credentials` (default: looked up on the first 401),
    `global_credentials` (False for a registry that is only pulled from, such as a
    base image's: the global SHIPYARD_REGISTRY_USER pair is then not sent),
    `insecure`, `ca_file`, `certs_dirs`, `timeout` (connect, read; default from
    `$SHIPYARD_HTTP_TIMEOUT`, else 10 s and 120 s), `retry`
    (`RetryPolicy`), `chunk_size` and `chunk_threshold` for uploads, `environ`,
    `session` and `on_request(method, path, status)`. `stats` counts requests
    and bytes, so a caller can show that a second push uploaded nothing. URLs the
    registry names (upload locations, pages, redirects) get its credentials only
    when they are on its own origin; see `shipyard.oci.remote.transport`.
    """

    def ping(self) -> None:
        """Check that the registry speaks the v2 API and, if it asks, that we can log in."""
        url = self._url("/v2/")
        with self._send("ping", lambda: self._authorized("GET", url, "ping", ())) as resp:
            if resp.status_code != 200:
                raise self._error("ping", resp)

    def check_push(self, repo: str) -> None:
        """Check that the credentials may push to `repo`, storing nothing.

        Starts a blob upload (the request a push makes first, which needs push
        access) and cancels it. A refusal raises RegistryError (401/403: not
        allowed); a registry that cannot cancel uploads is left to expire it.
        """
        validate_repository(repo)
        op = f"check push access to {repo}"
        location = self._start_upload(repo, "", None, op)
        if location is None:
            return
        with (
            contextlib.suppress(RegistryError),
            self._send(op, lambda: self._authorized("DELETE", location, op, [_push(repo)])),
        ):
            pass

    def blob_exists(self, repo: str, digest: str) -> bool:
        """True if `repo` has the blob `digest` (HEAD)."""
        validate_repository(repo)
        validate_digest(digest)
        op = f"check blob {digest} in {repo}"
        url = self._url(f"/v2/{repo}/blobs/{digest}")
        with self._send(op, lambda: self._authorized("HEAD", url, op, [_pull(repo)])) as resp:
            if resp.status_code in (200, 404):
                return resp.status_code == 200
            raise self._error(op, resp)

    def push_blob(
        self,
        repo: str,
        digest: str,
        size: int,
        path: Path,
        *,
        mount_from: str | None = None,
        chunk_size: int | None = None,
    ) -> bool:
        """Make `repo` hold the blob in `path`; return whether any bytes were uploaded.

        Skips a blob the repository has, mounts it from `mount_from` when the registry
        can, else uploads it in one PUT, or in PATCH chunks of `chunk_size` (default
        for blobs over the chunk threshold). A failed upload restarts from the start.
        """
        validate_repository(repo)
        validate_digest(digest)
        if mount_from is not None:
            validate_repository(mount_from)
        op = f"push blob {digest} to {repo}"
        actual = path.stat().st_size
        if actual != size:
            raise RegistryError(self.host, op, f"{path} has {actual} bytes, expected {size}")
        if self.blob_exists(repo, digest):
            self._count(blobs_skipped=1)
            return False
        if chunk_size is None and size > self._chunk_threshold:
            chunk_size = self._chunk_size
        chunks = -(-size // chunk_size) if chunk_size else 1
        progress = _Progress(self._retry.start(), renewals=3 * chunks + 3)
        while True:
            try:
                location = self._start_upload(repo, digest, mount_from, op)
                if location is None:
                    return False
                if chunk_size is None:
                    self._upload_whole(location, repo, digest, size, path, op)
                else:
                    self._upload_chunks(
                        location, repo, digest, size, path, chunk_size, op, progress
                    )
            except RegistryError as exc:
                self._pause_or_raise(op, exc, progress.backoff)
                if isinstance(exc, _SessionLost):
                    progress.backoff.refund()  # the failure that lost it was counted already
                if not self.blob_exists(repo, digest):
                    continue
                # else the failed attempt did finish: its answer was lost on the way back
            self._count(blobs_uploaded=1)
            return True

    def pull_blob(self, repo: str, digest: str, dest: Path, *, size: int | None = None) -> int:
        """Download a blob to `dest` atomically, verifying its digest; return its size."""
        validate_repository(repo)
        validate_digest(digest)
        op = f"pull blob {digest} from {repo}"
        return self._retrying(op, lambda: self._download(repo, digest, dest, size, op))

    def get_manifest(
        self, repo: str, reference: str, accept: Sequence[str] = MANIFEST_MEDIA_TYPES
    ) -> tuple[bytes, str, str]:
        """Fetch a manifest or index by tag or digest: (bytes, media type, digest)."""
        op = f"get manifest {self._ref(repo, reference)}"
        url = self._url(f"/v2/{repo}/manifests/{reference}")
        headers = {"Accept": ", ".join(accept)}
        scopes = [_pull(repo)]
        attempt = functools.partial(self._authorized, "GET", url, op, scopes, headers, stream=True)

        def fetch() -> tuple[bytes, str, str | None]:
            # The body is read inside the retried attempt: one cut short is asked again.
            with self._settled(op, attempt()) as resp:
                if resp.status_code != 200:
                    raise self._error(op, resp)
                data = self._read_body(op, resp, _MAX_MANIFEST)
                media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
                return data, media_type, resp.headers.get("Docker-Content-Digest")

        data, media_type, header = self._retrying(op, fetch)
        if media_type in ("", "application/json", _OCTETS):
            # Only a hint: the document is checked by whoever reads it (OCIError there).
            with contextlib.suppress(ValueError, AttributeError):
                said = _json.loads(data).get("mediaType", media_type)
                media_type = said if isinstance(said, str) else media_type
        return data, media_type, self._check_digest(op, data, reference, header)

    def manifest_exists(self, repo: str, reference: str) -> str | None:
        """The digest of the manifest `reference` (tag or digest) in `repo`, or None (HEAD)."""
        op = f"check manifest {self._ref(repo, reference)}"
        url = self._url(f"/v2/{repo}/manifests/{reference}")
        headers = {"Accept": ", ".join(MANIFEST_MEDIA_TYPES)}
        with self._send(
            op, lambda: self._authorized("HEAD", url, op, [_pull(repo)], headers)
        ) as resp:
            if resp.status_code == 404:
                return None
            if resp.status_code != 200:
                raise self._error(op, resp)
            header = resp.headers.get("Docker-Content-Digest")
        if header and is_digest(header):
            return header
        return self.get_manifest(repo, reference)[2]

    def put_manifest(self, repo: str, reference: str, data: bytes, media_type: str) -> str:
        """Upload a manifest or index under a digest or tag and return its digest.

        Push by digest first; a tag is only a put_manifest with a tag reference, and
        callers move tags last, once everything they point to is in place.
        """
        op = f"put manifest {self._ref(repo, reference)}"
        digest = _hash(reference.partition(":")[0] if is_digest(reference) else "sha256", data)
        if is_digest(reference) and digest != reference:
            raise RegistryError(self.host, op, f"the manifest bytes have digest {digest}")
        url = self._url(f"/v2/{repo}/manifests/{reference}")
        headers = {"Content-Type": media_type}
        attempt = functools.partial(
            self._authorized, "PUT", url, op, [_push(repo)], headers, lambda: data
        )
        with self._send(op, attempt) as resp:
            if resp.status_code not in (200, 201, 202):
                raise self._error(op, resp)
            header = resp.headers.get("Docker-Content-Digest")
        if header and header.partition(":")[0] == digest.partition(":")[0] and header != digest:
            raise RegistryError(self.host, op, f"the registry stored {header}, not {digest}")
        return digest

    def tags(self, repo: str) -> list[str]:
        """Every tag of `repo`, following the registry's pagination."""
        validate_repository(repo)
        op = f"list tags of {repo}"
        url: str | None = self._url(f"/v2/{repo}/tags/list")
        found: list[str] = []
        for _ in range(_MAX_PAGES):
            if url is None:
                break
            page = url
            attempt = functools.partial(self._authorized, "GET", page, op, [_pull(repo)])
            with self._send(op, attempt) as resp:
                if resp.status_code != 200:
                    raise self._error(op, resp)
                try:
                    listed = _json.loads(resp.content).get("tags") or []
                    if not isinstance(listed, list) or not all(isinstance(t, str) for t in listed):
                        raise TypeError("tags is not a list of strings")
                    found.extend(listed)
                except (ValueError, AttributeError, TypeError):
                    detail = "the tag list is not a JSON object with a list of tag names"
                    raise RegistryError(self.host, op, detail) from None
                link = resp.links.get("next", {}).get("url")
            url = urljoin(page, link) if link else None
        return found

    # -- blobs ----------------------------------------------------------------------------

    def _start_upload(self, repo: str, digest: str, mount_from: str | None, op: str) -> str | None:
        """POST an upload (or a mount); the upload URL, or None when the blob was mounted."""
        url = self._url(f"/v2/{repo}/blobs/uploads/")
        scopes = [_push(repo)]
        if mount_from is not None:
            url = _with_query(url, mount=digest, **{"from": mount_from})
            scopes.append(_pull(mount_from))
        with self._send(op, lambda: self._authorized("POST", url, op, scopes)) as resp:
            location = resp.headers.get("Location")
            if resp.status_code == 201 and mount_from is not None:
                self._count(blobs_mounted=1)
                return None
            if resp.status_code != 202 or not location:
                raise self._error(op, resp)
        return urljoin(url, location)

    def _upload_whole(
        self, location: str, repo: str, digest: str, size: int, path: Path, op: str
    ) -> None:
        """Monolithic: one PUT with the whole blob."""
        sent = functools.partial(self._count, "bytes_uploaded")
        with path.open("rb") as handle:
            body = functools.partial(_Slice, handle, 0, size, sent)
            headers = {"Content-Type": _OCTETS}
            url = _with_query(location, digest=digest)
            self._expect(op, 201, "PUT", url, scopes=[_push(repo)], headers=headers, body=body)

    def _upload_chunks(
        self,
        location: str,
        repo: str,
        digest: str,
        size: int,
        path: Path,
        chunk_size: int,
        op: str,
        progress: _Progress,
    ) -> None:
        """PATCH chunks, then the closing PUT; a failed request resumes where the registry is.

        The blob's budget (`progress`) is renewed when the registry holds more than
        this session had, a bounded number of times, so a long upload through a
        flaky network still ends, and one whose registry keeps losing what it
        stored spends the budget: a Range that goes back below what was confirmed
        counts as a failed attempt, and the time cap is the blob's.
        """
        scopes = [_push(repo)]
        sent = functools.partial(self._count, "bytes_uploaded")
        offset = 0
        progress.new_session()
        with path.open("rb") as handle:
            while True:
                try:
                    if offset >= size:
                        url = _with_query(location, digest=digest)
                        self._expect(op, 201, "PUT", url, scopes)
                        return
                    length = min(chunk_size, size - offset)
                    end = offset + length - 1
                    body = functools.partial(_Slice, handle, offset, length, sent)
                    headers = {"Content-Type": _OCTETS, "Content-Range": f"{offset}-{end}"}
                    resp = self._expect(op, 202, "PATCH", location, scopes, headers, body)
                    stored = resp.headers.get("Range", f"0-{end}").rpartition("-")[2]
                    if not resp.headers.get("Location") or stored != str(end):
                        detail = f"chunk {offset}-{end} was not stored whole"
                        raise RegistryError(self.host, op, detail)
                    location = urljoin(location, resp.headers["Location"])
                    offset += length
                    progress.reached(offset)
                except RegistryError as exc:
                    self._pause_or_raise(op, exc, progress.backoff)
                    location, held = self._upload_offset(location, size, scopes, op)
                    if held < offset:
                        detail = f"the registry holds {held} bytes after confirming {offset}"
                        lost = RegistryError(self.host, op, detail, transient=True)
                        self._pause_or_raise(op, lost, progress.backoff)
                    offset = held
                    progress.reached(offset)

    def _upload_offset(
        self, location: str, size: int, scopes: Sequence[str], op: str
    ) -> tuple[str, int]:
        """Where an interrupted chunked upload stands: its URL and how many bytes it holds.

        An upload the registry no longer knows (it may have been completed by the
        request whose answer was lost) or whose state is unclear is a transient
        error, so the caller checks for the blob and else starts again.
        """
        attempt = functools.partial(self._authorized, "GET", location, op, scopes)
        with self._send(op, attempt) as resp:
            end = resp.headers.get("Range", "").rpartition("-")[2]
            moved = resp.headers.get("Location")
            # "0-0" is what a registry says for both 0 and 1 bytes held: start again.
            held = int(end) + 1 if end.isdigit() and end != "0" else 0
            if resp.status_code not in (200, 204) or not 0 < held <= size:
                detail = f"the upload session answered HTTP {resp.status_code}, Range {end!r}"
                raise _SessionLost(self.host, op, detail + "; starting again", transient=True)
        return (urljoin(location, moved) if moved else location), held

    def _expect(
        self,
        op: str,
        status: int,
        method: str,
        url: str,
        scopes: Sequence[str],
        headers: Mapping[str, str] | None = None,
        body: Callable[[], Any] | None = None,
    ) -> requests.Response:
        """One request of an upload session (never retried alone), which must answer `status`."""
        attempt = functools.partial(self._authorized, method, url, op, scopes, headers, body)
        with self._send(op, attempt, retry=False) as resp:
            if resp.status_code != status:
                raise self._error(op, resp)
        return resp

    def _download(self, repo: str, digest: str, dest: Path, size: int | None, op: str) -> int:
        url = self._url(f"/v2/{repo}/blobs/{digest}")
        algorithm, _, expected = digest.partition(":")
        with self._send(
            op, lambda: self._authorized("GET", url, op, [_pull(repo)], stream=True)
        ) as resp:
            if resp.status_code != 200:
                raise self._error(op, resp)
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
            try:
                hasher, total = hashlib.new(algorithm), 0
                with os.fdopen(fd, "wb") as out:
                    try:
                        for chunk in resp.iter_content(1 << 20):
                            if size is not None and total + len(chunk) > size:
                                # Never more than the descriptor said: a hostile registry
                                # cannot fill the disk behind a small descriptor.
                                detail = f"the registry sent more than the {size} bytes asked for"
                                raise RegistryError(self.host, op, detail)
                            hasher.update(chunk)
                            out.write(chunk)
                            total += len(chunk)
                            self._count(bytes_downloaded=len(chunk))
                    except requests.RequestException as exc:
                        detail = f"the download broke off ({failure_reason(exc)})"
                        raise RegistryError(self.host, op, detail, transient=True) from exc
                    out.flush()
                    os.fsync(out.fileno())
                if size is not None and total < size:
                    detail = f"the download was cut short at {total} of {size} bytes"
                    raise RegistryError(self.host, op, detail, transient=True)
                if hasher.hexdigest() != expected or (size is not None and total != size):
                    got = f"{algorithm}:{hasher.hexdigest()}, {total} bytes"
                    raise RegistryError(self.host, op, f"the registry sent content with {got}")
                os.chmod(tmp, 0o644)
                os.replace(tmp, dest)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        return total

    def _check_digest(self, op: str, data: bytes, reference: str, header: str | None) -> str:
        """The manifest's digest, checked against a digest reference and the registry's header."""
        computed = _hash("sha256", data)
        if is_digest(reference):
            if _hash(reference.partition(":")[0], data) != reference:
                raise RegistryError(self.host, op, f"the registry sent a manifest with {computed}")
            return reference
        if header and header.startswith("sha256:") and header != computed:
            raise RegistryError(self.host, op, f"Docker-Content-Digest {header} != {computed}")
        return computed

    # -- helpers ---------------------------------------------------------------------------

    def _ref(self, repo: str, reference: str) -> str:
        validate_repository(repo)
        if is_digest(reference):
            return f"{repo}@{reference}"
        return f"{repo}:{validate_tag(reference, text=f'{repo}:{reference}')}"
