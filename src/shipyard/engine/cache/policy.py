"""A shared cache under a CI's policy: its mode, going on without it, what it did.

`GuardedRemote` wraps any protocol's client (oci://, http[s]://, grpc[s]://) with
the same rules, so a build behaves alike whichever server holds its cache:

- the mode (`shipyard.engine.cache.mode`): a read-only build never writes, a
  write-only build never reads;
- a server that cannot be reached or answers too late (the client's
  `RemoteUnavailable`, raised after its bounded retries) is disabled for the rest
  of the build with one warning; the build goes on with its local cache alone and
  never fails because of the shared one;
- a server that accepts no writes (the client's `writable` is False) is never
  written to, with one note;
- `summary()` is what report.json's `cache.remote` records and the CLI's summary
  line shows: hits, misses and stores counted here, requests and bytes by the
  client (`stats`).

The library never prints: the warning and the note go to this module's logger.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from shipyard.artifacts import Artifact
from shipyard.engine.cache.checks import Declared
from shipyard.engine.cache.endpoint import (
    Connection,
    RemoteStats,
    RemoteUnavailable,
    open_remote,
    parse_endpoint,
)
from shipyard.engine.cache.mode import CacheMode
from shipyard.engine.sizes import format_size

__all__ = ["GuardedRemote", "RemoteClient", "RemoteSummary", "open_guarded", "public_url"]

_log = logging.getLogger(__name__)


class RemoteClient(Protocol):
    """What every protocol's client offers: the cache calls, its counters, and
    whether the server takes writes."""

    @property
    def stats(self) -> RemoteStats:
        """What the client did so far (requests and bytes are read from it)."""
        ...

    @property
    def writable(self) -> bool:
        """False when the server accepts no writes (learned from it, or refused)."""
        ...

    def restore(
        self, key: str, repo: Path, declared: Declared | None = None
    ) -> tuple[Artifact, ...] | None:
        """The hit's outputs put in place, or None; RemoteUnavailable when unreachable."""
        ...

    def store(self, key: str, outputs: tuple[Artifact, ...], repo: Path) -> None:
        """Record the outputs of `key`; RemoteUnavailable when unreachable."""
        ...


@dataclass(frozen=True)
class RemoteSummary:
    """What a build did with its shared cache: for report.json and the CLI's summary line."""

    url: str  # without credentials, query or fragment
    mode: CacheMode
    hits: int = 0
    misses: int = 0
    stored: int = 0
    calls: int = 0
    bytes_down: int = 0
    bytes_up: int = 0
    disabled: str | None = None  # why the build went on without it
    read_only_server: bool = False  # the server took no writes

    def to_json(self) -> dict[str, Any]:
        """report.json's `cache.remote` object: every field, by name."""
        return asdict(self)

    def line(self) -> str:
        """One line for the end of a build, e.g. `remote cache oci://h/r (read-write):
        3 hits, 1 miss, 1 stored; 2.1 MB down, 0.4 MB up in 12 requests`."""
        miss = "miss" if self.misses == 1 else "misses"
        hit = "hit" if self.hits == 1 else "hits"
        text = (
            f"remote cache {self.url} ({self.mode}): {self.hits} {hit}, {self.misses} {miss}, "
            f"{self.stored} stored; {format_size(self.bytes_down)} down, "
            f"{format_size(self.bytes_up)} up in {self.calls} requests"
        )
        if self.read_only_server:
            text += "; the server takes no writes"
        if self.disabled:
            text += "; disabled after the warning above, the build went on without it"
        return text


def public_url(url: str) -> str:
    """`url` without a query, a fragment or user information (none is accepted, but a
    report is never the place to find one)."""
    scheme, sep, rest = url.partition("://")
    rest = rest.split("?", 1)[0].split("#", 1)[0]
    host, slash, path = rest.partition("/")
    return f"{scheme}{sep}{host.rpartition('@')[2]}{slash}{path}"


class GuardedRemote:
    """A shared cache's client under the build's mode; see the module docstring.

    Thread-safe: actions restore and store from several workers. `client` None is a
    cache that could not even be opened (`reason`): disabled from the start."""

    def __init__(
        self, client: RemoteClient | None, url: str, mode: CacheMode, *, reason: str = ""
    ) -> None:
        self.client = client
        self.url = public_url(url)
        self.mode = mode
        self._lock = threading.Lock()
        self._disabled: str | None = None
        self._noted = False
        self._hits = self._misses = self._stored = 0
        if client is None:
            self._disable(reason or "could not be opened")

    @property
    def reads(self) -> bool:
        """Whether a restore asks the server (not write-only, not disabled)."""
        return self.mode != "write-only" and self._disabled is None

    @property
    def writes(self) -> bool:
        """Whether a store may reach the server (not read-only, not disabled)."""
        return self.mode != "read-only" and self._disabled is None

    @property
    def uploads_local_hits(self) -> bool:
        """A write-only warming job stores what the local cache restored too."""
        return self.mode == "write-only"

    def restore(
        self, key: str, repo: Path, declared: Declared | None = None
    ) -> tuple[Artifact, ...] | None:
        """The client's hit, or None: on a miss, in write-only mode, once disabled."""
        if self.client is None or not self.reads:
            return None
        try:
            found = self.client.restore(key, repo, declared)
        except RemoteUnavailable as exc:
            self._disable(str(exc))
            return None
        with self._lock:
            if found is None:
                self._misses += 1
            else:
                self._hits += 1
        return found

    def store(self, key: str, outputs: tuple[Artifact, ...], repo: Path) -> None:
        """Store through the client, unless read-only, disabled, or the server takes no
        writes (one note); a server gone on the way disables the cache."""
        if self.client is None or not self.writes:
            return
        if not self.client.writable:
            self._note_read_only()
            return
        try:
            self.client.store(key, outputs, repo)
        except RemoteUnavailable as exc:
            self._disable(str(exc))
            return
        if not self.client.writable:  # refused during the call: nothing was stored
            self._note_read_only()
            return
        with self._lock:
            self._stored += 1

    def summary(self) -> RemoteSummary:
        """What this build did with the cache so far."""
        stats = self.client.stats if self.client is not None else RemoteStats()
        with self._lock:
            return RemoteSummary(
                url=self.url,
                mode=self.mode,
                hits=self._hits,
                misses=self._misses,
                stored=self._stored,
                calls=stats.calls,
                bytes_down=stats.bytes_down,
                bytes_up=stats.bytes_up,
                disabled=self._disabled,
                read_only_server=self._noted,
            )

    def _disable(self, reason: str) -> None:
        with self._lock:
            if self._disabled is not None:
                return
            self._disabled = reason
        _log.warning(
            "warning: remote cache %s unavailable (%s); going on with the local cache "
            "only for the rest of this build",
            self.url,
            reason,
        )

    def _note_read_only(self) -> None:
        with self._lock:
            if self._noted:
                return
            self._noted = True
        _log.warning(
            "note: remote cache %s takes no writes (a read-only server or credentials); "
            "nothing is stored there in this build",
            self.url,
        )


def open_guarded(url: str, mode: CacheMode, env: Mapping[str, str]) -> GuardedRemote:
    """The client of `url`'s protocol under `mode`. A bad URL or variable is a
    UsageError (exit 2) before anything runs; a server that cannot be reached while
    the client opens is a cache disabled from the start (one warning)."""
    endpoint = parse_endpoint(url)
    connection = Connection.from_env(env)
    try:
        client = _opened(open_remote(endpoint, connection, env))
    except RemoteUnavailable as exc:
        return GuardedRemote(None, url, mode, reason=str(exc))
    return GuardedRemote(client, url, mode)


def _opened(client: object) -> RemoteClient:
    """`client`, checked to have what GuardedRemote reads (a protocol client does)."""
    if not all(hasattr(client, name) for name in ("stats", "writable", "restore", "store")):
        raise TypeError(f"{type(client).__name__} lacks stats, writable, restore or store")
    return client  # type: ignore[return-value]
