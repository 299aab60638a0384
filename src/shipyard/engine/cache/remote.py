"""A registry-backed action cache, so CI machines share work through an OCI registry.

Each action's outputs are stored as an OCI artifact: the output files are blobs
(content-addressed, so they dedupe across actions and machines), listed as layers
of a manifest whose tag is the action key. Blobs go up first and the tag last, so
a reader never finds a key whose outputs are incomplete.

Temporaries live under the checkout's dist/ (never the system temp folder), where
the next build sweeps what a killed one left.

Anyone who can push to the cache repository writes what a restore reads, so a
manifest is untrusted input: its layers go only where the action declares, with
mode 644 or 755, and only after their bytes match their digests (see
`shipyard.engine.cache.restore`). Anything else is a miss, logged as a warning.

A registry that cannot be reached (after the bounded retries), or that fails in
any other way than a missing tag or a refused entry, raises `RemoteUnavailable`:
the build goes on without it (`shipyard.engine.cache.policy`). A registry that
refuses a push (HTTP 401/403: the credentials may only pull) makes the cache
read-only (`writable` False) instead.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from shipyard import _json
from shipyard._environ import CACHE_USER
from shipyard._http.errors import RemoteError
from shipyard.artifacts import Artifact
from shipyard.engine.cache.checks import (
    Declared,
    RefusedEntry,
    checked_description,
    checked_mode,
    checked_path,
    checked_sha256,
    checked_size,
    stored_mode,
)
from shipyard.engine.cache.endpoint import CacheEndpoint, Connection, RemoteStats, RemoteUnavailable
from shipyard.engine.cache.patience import Patience, first_contact
from shipyard.engine.cache.placed import PlacedFiles, scratch
from shipyard.engine.cache.restore import PlacedFile, place_files
from shipyard.oci import mediatypes
from shipyard.oci.model import Descriptor, artifact_manifest_json, as_annotations
from shipyard.oci.remote.auth import Credentials, find_credentials
from shipyard.oci.remote.registry import (
    MEDIA_OCI_MANIFEST,
    AuthError,
    NotFound,
    Registry,
    RegistryError,
)

__all__ = ["ARTIFACT_TYPE", "RemoteCache", "open_registry_cache"]

ARTIFACT_TYPE = mediatypes.SHIPYARD_ACTION
_EMPTY = b"{}"
_TITLE = "org.opencontainers.image.title"
_MODE = "dev.shipyard.mode"  # octal; a zipapp stays executable
_ABOUT = "dev.shipyard.artifact"  # JSON: the artifact's kind, binary, platform, metadata
_OCTAL = re.compile(r"[0-7]{1,6}")
_log = logging.getLogger(__name__)


def open_registry_cache(
    endpoint: CacheEndpoint, connection: Connection, environ: Mapping[str, str] | None = None
) -> RemoteCache:
    """The cache in the registry repository `endpoint` names (`oci://HOST/REPOSITORY`),
    with the connection's patience (`shipyard.engine.cache.patience`): brief until the
    registry first answers, then each request waits at most `connection.timeout`
    seconds for an answer and is tried `connection.retries` more times (quietly: the
    cache's one warning says what a failure means). Credentials: $SHIPYARD_CACHE_USER
    and $SHIPYARD_CACHE_PASSWORD when set, else the registry's own (docker login,
    $SHIPYARD_REGISTRY_USER...); the CA: $SHIPYARD_CACHE_CA, else the registry's."""
    if connection.basic is not None:
        user, password = connection.basic
        credentials: Credentials | None = Credentials(user, password, source=CACHE_USER.name)
    else:
        credentials = find_credentials(endpoint.host, environ=environ)
    patience = Patience(connection)
    timeout, retry = first_contact(connection)
    registry = Registry(
        endpoint.host,
        credentials=credentials,
        ca_file=connection.ca_file,
        timeout=timeout,
        retry=retry,
        environ=environ,
        on_request=patience,
    )
    patience.attach(registry)
    return RemoteCache(registry, endpoint.path)


@dataclass
class RemoteCache:
    """Action outputs as OCI artifacts in one registry repository, tagged by key.

    `writable` turns False once the registry refuses a push (the credentials may
    only pull); `stats` says what this client did (requests and bytes from the
    registry client's own counters)."""

    registry: Registry
    repository: str
    writable: bool = True
    _counts: RemoteStats = field(default_factory=RemoteStats, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _placed: PlacedFiles = field(default_factory=PlacedFiles, repr=False)

    @property
    def stats(self) -> RemoteStats:
        """Hits, misses and stores counted here; requests and bytes, the registry's."""
        sent = getattr(self.registry, "stats", None)
        with self._lock:
            counts = RemoteStats(**vars(self._counts))
        if sent is not None:
            counts.calls += sum(sent.requests.values())
            counts.bytes_down += sent.bytes_downloaded
            counts.bytes_up += sent.bytes_uploaded
        return counts

    def _count(self, **amounts: int) -> None:
        with self._lock:
            for name, amount in amounts.items():
                setattr(self._counts, name, getattr(self._counts, name) + amount)

    def restore(
        self, key: str, repo: Path, declared: Declared | None = None
    ) -> tuple[Artifact, ...] | None:
        """Pull the artifact tagged `key` and put its files in place; None on a miss.

        Every blob is downloaded before any output is replaced, so a blob the
        registry lost is a miss that leaves the outputs as they were. A manifest
        naming a path outside `declared` (default: dist/), another mode than 644
        or 755, or a blob with other bytes than its digest is a miss with a
        warning, and nothing is written. A registry that cannot be reached, or
        fails otherwise, raises RemoteUnavailable.
        """
        restored = self._restore(key, repo, declared)
        self._count(**({"hits": 1} if restored is not None else {"misses": 1}))
        return restored

    def _restore(
        self, key: str, repo: Path, declared: Declared | None
    ) -> tuple[Artifact, ...] | None:
        try:
            data, _, _ = self.registry.get_manifest(self.repository, key, [MEDIA_OCI_MANIFEST])
        except NotFound:
            return None
        except RegistryError as exc:
            raise _unavailable(exc) from exc
        self._count(bytes_down=len(data))
        try:
            layers = _layers(data, declared or Declared.dist())
            if layers is None:
                return None  # not a shipyard cache entry
            with scratch(repo) as tmp, self._placed.fetching(x.sha256 for x in layers):
                pulled: list[PlacedFile] = []
                here: set[str] = set()  # pulled by this restore (a file may be listed twice)
                for layer in layers:
                    known = self._placed.known(layer.sha256, layer.size)
                    blob = known or Path(tmp) / layer.sha256
                    if known is None and layer.sha256 not in here:
                        if not self._pull(layer, blob):
                            return None
                        here.add(layer.sha256)
                    pulled.append(
                        PlacedFile(
                            blob, layer.parts, layer.sha256, layer.size, layer.mode, layer.about
                        )
                    )
                restored, _ = place_files(repo, pulled)
                self._placed.remember(restored)
        except RefusedEntry as exc:
            _log.warning(
                "remote cache entry %s/%s:%s ignored: %s; building the action instead",
                self.registry.host,
                self.repository,
                key,
                exc,
            )
            return None
        return restored

    def _pull(self, layer: PlacedFile, blob: Path) -> bool:
        """Download `layer`'s blob to `blob`; False when the registry lost it."""
        try:
            self.registry.pull_blob(
                self.repository, f"sha256:{layer.sha256}", blob, size=layer.size
            )
        except NotFound:
            return False
        except RegistryError as exc:
            if _unreachable(exc):
                raise _unavailable(exc) from exc
            raise RefusedEntry(f"the blob for {'/'.join(layer.parts)}: {exc}") from exc
        return True

    def store(self, key: str, outputs: tuple[Artifact, ...], repo: Path) -> None:
        """Push the output blobs, an empty config, then the manifest tagged `key`.

        A refused push (HTTP 401/403) stores nothing and sets `writable` False; a
        registry that cannot be reached, or fails otherwise, raises RemoteUnavailable."""
        try:
            self._store(key, outputs, repo)
        except AuthError as exc:
            if exc.status not in (401, 403):
                raise _unavailable(exc) from exc
            self.writable = False
            return
        except RegistryError as exc:
            raise _unavailable(exc) from exc
        self._count(stored=1)
        self._placed.remember(outputs)

    def _store(self, key: str, outputs: tuple[Artifact, ...], repo: Path) -> None:
        config = Descriptor.of(mediatypes.OCI_EMPTY, _EMPTY)
        with scratch(repo) as tmp:
            empty = Path(tmp) / "empty.json"
            empty.write_bytes(_EMPTY)
            self.registry.push_blob(self.repository, config.digest, config.size, empty)
            for artifact in outputs:
                digest = f"sha256:{artifact.sha256}"
                self.registry.push_blob(self.repository, digest, artifact.size, artifact.path)
        layers = [_layer(artifact, repo) for artifact in outputs]
        data = artifact_manifest_json(ARTIFACT_TYPE, config, layers)
        self.registry.put_manifest(self.repository, key, data, MEDIA_OCI_MANIFEST)
        self._count(bytes_up=len(data))


def _unreachable(exc: RemoteError) -> bool:
    """Whether `exc` (or the error its retries gave up on) is the server's fault on the
    way (no answer, a time-out, a 5xx), not the content's."""
    cause: BaseException | None = exc
    while isinstance(cause, RemoteError):
        if cause.transient:
            return True
        cause = cause.__cause__
    return False


def _unavailable(exc: RegistryError) -> RemoteUnavailable:
    return RemoteUnavailable(str(exc))


def _layer(artifact: Artifact, repo: Path) -> Descriptor:
    """The layer of a cache manifest that holds `artifact`: its bytes, and where it goes,
    its mode and what it is as annotations."""
    notes = {
        _TITLE: str(artifact.path.relative_to(repo)),
        _MODE: f"{stored_mode(artifact.path):o}",
        _ABOUT: json.dumps(artifact.describe(), sort_keys=True),
    }
    return Descriptor(
        mediatypes.OCTET_STREAM,
        f"sha256:{artifact.sha256}",
        artifact.size,
        annotations=as_annotations(notes),
    )


def _layers(data: bytes, declared: Declared) -> list[PlacedFile] | None:
    """The checked layers of a cache manifest (`source` unset), None if it is not one."""
    try:
        manifest = _json.loads(data)
    except ValueError:
        raise RefusedEntry("the manifest is not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("artifactType") != ARTIFACT_TYPE:
        return None
    layers = manifest.get("layers")
    if not isinstance(layers, list):
        raise RefusedEntry("the manifest's layers are not a list")
    checked: list[PlacedFile] = []
    for layer in layers:
        notes = layer.get("annotations") if isinstance(layer, dict) else None
        if not isinstance(layer, dict) or not isinstance(notes, dict):
            raise RefusedEntry("a layer has no annotations")
        digest = layer.get("digest")
        if not isinstance(digest, str) or not digest.startswith("sha256:"):
            raise RefusedEntry(f"layer digest {digest!r} is not a sha256 digest")
        mode = notes.get(_MODE, "644")
        if not isinstance(mode, str) or not _OCTAL.fullmatch(mode):
            raise RefusedEntry(f"mode {mode!r} is not an octal number")
        checked.append(
            PlacedFile(
                Path(),
                checked_path(notes.get(_TITLE), declared),
                checked_sha256(digest.removeprefix("sha256:")),
                checked_size(layer.get("size")),
                checked_mode(int(mode, 8)),
                checked_description(_about(notes.get(_ABOUT)), declared),
            )
        )
    return checked


def _about(text: object) -> object:
    """The parsed artifact annotation (checked by the caller)."""
    if not isinstance(text, str):
        raise RefusedEntry("a layer does not describe its artifact")
    try:
        return _json.loads(text)
    except ValueError:
        raise RefusedEntry("a layer's artifact annotation is not JSON") from None
