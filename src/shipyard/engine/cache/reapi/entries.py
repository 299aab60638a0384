"""Restore and store an action through any store of ActionResults and CAS blobs.

The gRPC client and the HTTP client differ only in how they move an ActionResult
and a blob; what an entry is, and how far a restore trusts it, is here once. A
restore reads the ActionResult, checks it (`results.result_files`), downloads every
blob into a scratch folder under dist/ and lets `place_files` put the files in
place, each one's sha256 and size checked again as it is copied: a blob the server
lost is a miss, one with other bytes than its digest a miss with a warning, and
nothing is written either way. A store uploads the blobs the server misses, then
the ActionResult, so a reader never finds a result whose blobs are not there yet.
"""

from __future__ import annotations

import abc
import dataclasses
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

from shipyard.artifacts import Artifact
from shipyard.engine.cache.checks import Declared, RefusedEntry
from shipyard.engine.cache.endpoint import RemoteStats
from shipyard.engine.cache.placed import PlacedFiles, scratch
from shipyard.engine.cache.reapi.results import (
    action_for,
    action_result,
    digest_of,
    result_files,
)
from shipyard.engine.cache.reapi.stubs import re_pb2
from shipyard.engine.cache.restore import place_files

__all__ = ["Blob", "ResultStore", "WritesRefused"]

_log = logging.getLogger(__name__)

# A blob to upload: its digest, and its bytes or the file that holds them.
Blob = tuple[re_pb2.Digest, bytes | Path]


class WritesRefused(Exception):
    """The server refused a write (it serves reads only, or the credentials may only
    read): the store stops, and nothing more is written in this build."""


class ResultStore(abc.ABC):
    """An OutputCache over ActionResults and CAS blobs; a protocol fills in the moves.

    `where` names the server (and instance) in warnings; `stats` counts what was
    done (`count` adds to it from any thread).
    """

    where: str
    stats: RemoteStats
    _counting = threading.Lock()
    _refused = False

    def __init__(self) -> None:
        self.placed = PlacedFiles()  # copied, not downloaded again, by later restores

    @property
    def writable(self) -> bool:
        """False for a server that takes no ActionResult updates (nothing is stored)."""
        return not self._refused

    def refuse_writes(self) -> None:
        """Remember that the server refused a write: `writable` is False from now on."""
        self._refused = True

    def count(self, **amounts: int) -> None:
        """Add `amounts` to the counters of `stats` (actions run on several threads)."""
        with self._counting:
            for name, amount in amounts.items():
                setattr(self.stats, name, getattr(self.stats, name) + amount)

    @abc.abstractmethod
    def get_result(self, action: re_pb2.Digest) -> re_pb2.ActionResult | None:
        """The ActionResult stored for `action`; None when there is none. RefusedEntry
        when what is stored is no ActionResult."""

    @abc.abstractmethod
    def put_result(self, action: re_pb2.Digest, result: re_pb2.ActionResult) -> None:
        """Store `result` for `action`."""

    @abc.abstractmethod
    def missing(self, digests: Sequence[re_pb2.Digest]) -> set[str]:
        """The hashes of `digests` the server does not hold."""

    @abc.abstractmethod
    def upload(self, blobs: Sequence[Blob]) -> None:
        """Put `blobs` into the CAS."""

    @abc.abstractmethod
    def download(self, digests: Sequence[re_pb2.Digest], folder: Path) -> bool:
        """Write each blob of `digests` to `folder`/<hash>; False when one is missing."""

    def restore(
        self, key: str, repo: Path, declared: Declared | None = None
    ) -> tuple[Artifact, ...] | None:
        """Put the outputs recorded for `key` in place; None on a miss (a refused
        entry is a miss with a warning, and nothing is written)."""
        action = action_for(key).digest
        try:
            result = self.get_result(action)
            if result is None:
                self.count(misses=1)
                return None
            files = result_files(result, declared or Declared.dist())
            with scratch(repo) as tmp, self.placed.fetching(f.sha256 for f in files):
                known = {f.sha256: self.placed.known(f.sha256, f.size) for f in files}
                wanted = {
                    f.sha256: re_pb2.Digest(hash=f.sha256, size_bytes=f.size)
                    for f in files
                    if known[f.sha256] is None
                }
                if wanted and not self.download(list(wanted.values()), Path(tmp)):
                    self.count(misses=1)
                    return None
                placed = [
                    dataclasses.replace(f, source=known[f.sha256] or Path(tmp) / f.sha256)
                    for f in files
                ]
                restored, _ = place_files(repo, placed)
                self.placed.remember(restored)
        except RefusedEntry as exc:
            _log.warning(
                "remote cache entry %s for %s ignored: %s; building the action instead",
                self.where,
                key,
                exc,
            )
            self.count(misses=1)
            return None
        self.count(hits=1)
        return restored

    def store(self, key: str, outputs: tuple[Artifact, ...], repo: Path) -> None:
        """Upload the blobs the server misses (the outputs, the Action and Command),
        then the ActionResult for `key`. Nothing, on a server that takes no updates;
        a write it refuses (WritesRefused) stops the store and makes it read-only."""
        if not self.writable:
            _log.debug("%s takes no action cache updates: %s not stored", self.where, key)
            return
        messages = action_for(key)
        blobs: dict[str, Blob] = {}
        for data in (messages.action, messages.command):
            digest = digest_of(data)
            blobs[digest.hash] = (digest, data)
        for artifact in outputs:
            digest = re_pb2.Digest(hash=artifact.sha256, size_bytes=artifact.size)
            blobs[artifact.sha256] = (digest, artifact.path)
        try:
            wanted = self.missing([digest for digest, _ in blobs.values()])
            self.upload([blob for sha256, blob in blobs.items() if sha256 in wanted])
            self.put_result(messages.digest, action_result(outputs, repo))
        except WritesRefused as exc:
            self.refuse_writes()
            _log.debug("%s refused a write (%s): %s not stored", self.where, exc, key)
            return
        self.count(stored=1)
        self.placed.remember(outputs)
