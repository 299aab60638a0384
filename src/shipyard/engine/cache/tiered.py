"""The local cache in front of a shared one: local first, the shared cache behind it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shipyard.artifacts import Artifact
from shipyard.engine.cache.checks import Declared
from shipyard.engine.wrapper import OutputCache

__all__ = ["TieredCache"]


@dataclass
class TieredCache:
    """The local cache first, then the remote one; a remote hit fills the local cache.

    `upload_local_hits` (a write-only warming job): a local hit is stored in the
    remote cache too, so the remote ends up with every action of the build whatever
    the machine's local cache held."""

    local: OutputCache
    remote: OutputCache
    upload_local_hits: bool = False

    def restore(
        self, key: str, repo: Path, declared: Declared | None = None
    ) -> tuple[Artifact, ...] | None:
        """Local hit, else remote hit (copied into the local cache), else None."""
        found = self.local.restore(key, repo, declared)
        if found is not None:
            if self.upload_local_hits:
                self.remote.store(key, found, repo)
            return found
        found = self.remote.restore(key, repo, declared)
        if found is not None:
            self.local.store(key, found, repo)
        return found

    def store(self, key: str, outputs: tuple[Artifact, ...], repo: Path) -> None:
        """Store in the remote cache, then in the local one.

        In this order a key in the local cache is also in the remote one: a build
        killed between the two finds a local miss next time, takes the remote hit
        and fills the local cache. The other order would leave the remote without
        the key for good, since local hits never upload.
        """
        self.remote.store(key, outputs, repo)
        self.local.store(key, outputs, repo)
