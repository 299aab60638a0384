"""The local cache in front of a shared one: which is asked, which is filled."""

from __future__ import annotations

from pathlib import Path

from shipyard.artifacts import Artifact
from shipyard.engine.cache.checks import Declared
from shipyard.engine.cache.tiered import TieredCache


class _Dict:
    """An in-memory cache that records its calls."""

    def __init__(self, entries: dict[str, tuple[Artifact, ...]] | None = None) -> None:
        self.entries = dict(entries or {})
        self.calls: list[tuple[str, str]] = []

    def restore(
        self, key: str, repo: Path, declared: Declared | None = None
    ) -> tuple[Artifact, ...] | None:
        self.calls.append(("restore", key))
        return self.entries.get(key)

    def store(self, key: str, outputs: tuple[Artifact, ...], repo: Path) -> None:
        self.calls.append(("store", key))
        self.entries[key] = outputs


OUT = (Artifact("wheel", "", "any", Path("dist/a.whl"), "0" * 64, 1),)


def test_a_local_hit_never_asks_the_remote(tmp_path: Path) -> None:
    local, remote = _Dict({"k": OUT}), _Dict()
    assert TieredCache(local, remote).restore("k", tmp_path) == OUT
    assert remote.calls == []


def test_a_remote_hit_fills_the_local_cache(tmp_path: Path) -> None:
    local, remote = _Dict(), _Dict({"k": OUT})
    assert TieredCache(local, remote).restore("k", tmp_path) == OUT
    assert local.entries == {"k": OUT}


def test_a_store_goes_to_the_remote_first(tmp_path: Path) -> None:
    order: list[str] = []
    local, remote = _Dict(), _Dict()
    local.store = lambda key, outputs, repo: order.append("local")  # type: ignore[method-assign]
    remote.store = lambda key, outputs, repo: order.append("remote")  # type: ignore[method-assign]
    TieredCache(local, remote).store("k", OUT, tmp_path)
    assert order == ["remote", "local"]


def test_a_warming_job_uploads_what_its_local_cache_restored(tmp_path: Path) -> None:
    local, remote = _Dict({"k": OUT}), _Dict()
    assert TieredCache(local, remote, upload_local_hits=True).restore("k", tmp_path) == OUT
    assert remote.calls == [("store", "k")] and remote.entries == {"k": OUT}
