"""A client for one OCI distribution registry: blobs and manifests, pushed and pulled.

Blobs stream from and to disk: an upload checks for the blob first, then goes up
through `shipyard.oci.remote.upload` (a mount, one PUT or PATCH chunks, resumed or
started again within one retry budget per blob). Downloads are verified against
their length and digest and land atomically; one cut short is fetched again.
Manifests are pushed by digest first; tags are moved last by the caller.
Authentication, TLS, retries and the typed errors live in
`shipyard.oci.remote.transport`. A Registry is safe to share between threads.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urljoin

import requests

from shipyard import _json
from shipyard._http.transport import failure_reason

# Both families' types live in shipyard.oci.mediatypes; these names are kept for callers.
from shipyard.oci.mediatypes import DOCKER_LIST as MEDIA_DOCKER_LIST
from shipyard.oci.mediatypes import DOCKER_MANIFEST as MEDIA_DOCKER_MANIFEST
from shipyard.oci.mediatypes import MANIFEST_TYPES as MANIFEST_MEDIA_TYPES
from shipyard.oci.mediatypes import OCI_INDEX as MEDIA_OCI_INDEX
from shipyard.oci.mediatypes import OCI_MANIFEST as MEDIA_OCI_MANIFEST
from shipyard.oci.mediatypes import OCTET_STREAM as _OCTETS
from shipyard.oci.remote.auth import pull_scope, push_scope
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
from shipyard.oci.remote.upload import Progress, SessionLost, Upload

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


def _hash(algorithm: str, data: bytes) -> str:
    return f"{algorithm}:{hashlib.new(algorithm, data).hexdigest()}"


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
        location = Upload(self, repo, "", op).start(None)
        if location is None:
            return
        with (
            contextlib.suppress(RegistryError),
            self._send(op, lambda: self._authorized("DELETE", location, op, [push_scope(repo)])),
        ):
            pass

    def blob_exists(self, repo: str, digest: str) -> bool:
        """True if `repo` has the blob `digest` (HEAD)."""
        validate_repository(repo)
        validate_digest(digest)
        op = f"check blob {digest} in {repo}"
        url = self._url(f"/v2/{repo}/blobs/{digest}")
        with self._send(op, lambda: self._authorized("HEAD", url, op, [pull_scope(repo)])) as resp:
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
        progress = Progress(self._retry.start(), renewals=3 * chunks + 3)
        upload = Upload(self, repo, digest, op)
        while True:
            try:
                location = upload.start(mount_from)
                if location is None:
                    return False
                if chunk_size is None:
                    upload.whole(location, size, path)
                else:
                    upload.chunks(location, size, path, chunk_size, progress)
            except RegistryError as exc:
                self._pause_or_raise(op, exc, progress.backoff)
                if isinstance(exc, SessionLost):
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
        scopes = [pull_scope(repo)]
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
            op, lambda: self._authorized("HEAD", url, op, [pull_scope(repo)], headers)
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
            self._authorized, "PUT", url, op, [push_scope(repo)], headers, lambda: data
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
            attempt = functools.partial(self._authorized, "GET", page, op, [pull_scope(repo)])
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

    def _download(self, repo: str, digest: str, dest: Path, size: int | None, op: str) -> int:
        url = self._url(f"/v2/{repo}/blobs/{digest}")
        algorithm, _, expected = digest.partition(":")
        with self._send(
            op, lambda: self._authorized("GET", url, op, [pull_scope(repo)], stream=True)
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
