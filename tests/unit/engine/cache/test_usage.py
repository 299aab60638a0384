"""What the cache folder holds, part by part (`shipyard cache info`), its limit, and
the base blobs a build marks used (issue 18, item 8)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from shipyard.cli import main
from shipyard.engine.cache.local import blob_store, cache_limit, parse_size
from shipyard.engine.cache.usage import cache_info
from shipyard.errors import UsageError
from shipyard.oci.archive import write_docker_archive
from shipyard.oci.base import load_base
from shipyard.oci.layer import Entry, write_layer
from shipyard.oci.model import Image, Platform, append_layer
from tests.unit.engine.cache._filled import Filled, aged, size


def test_info_counts_every_part_and_the_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    filled = Filled(tmp_path / "cache")
    found = filled.cache.usage()
    parts = {p.folder: p for p in found.parts}
    assert set(parts) == {"v1", "oci", "manifests", "metadata", "sdist-wheels", "zipapps"}
    assert parts["metadata"].pruned and dict(parts["metadata"].counts) == {"entries": 0}
    assert parts["sdist-wheels"].pruned and dict(parts["sdist-wheels"].counts) == {"wheels": 0}
    v1 = [p for p in (tmp_path / "cache" / "v1").rglob("*") if p.is_file()]
    assert parts["v1"].size == size(v1)
    assert dict(parts["v1"].counts) == {"entries": 2, "blobs": 3}
    assert parts["oci"].size == 70_000 and dict(parts["oci"].counts) == {"blobs": 2, "notes": 0}
    assert parts["manifests"].size == 5_000
    assert parts["zipapps"].size == 50_000 and not parts["zipapps"].pruned
    assert found.managed == size(v1) + 75_000 == filled.cache.size()
    assert found.total == found.managed + 50_000
    # A build environment is shipyard's but never pruned: counted whole, outside the limit.
    env = tmp_path / "cache" / "build-envs" / ("a" * 40)
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_bytes(b"x" * 1000)
    (env / "shipyard-pins.json").write_text("{}")
    envs = {p.folder: p for p in filled.cache.usage().parts}["build-envs"]
    assert dict(envs.counts) == {"environments": 1} and not envs.pruned
    assert envs.what.startswith("PEP 517 build environments")
    shutil.rmtree(tmp_path / "cache" / "build-envs")

    info = cache_info(tmp_path / "cache", {"SHIPYARD_CACHE_MAX_SIZE": "off"})
    assert info.usage == found and info.dir == tmp_path / "cache"
    assert (info.limit, info.setting, info.last) == (None, "off", None)
    assert cache_info(tmp_path / "cache", {}).limit == 512 << 20
    assert main(["cache", "info", f"--cache-dir={tmp_path / 'cache'}"]) == 0
    out = capsys.readouterr().out
    assert f"({found.managed} bytes) stored by builds" in out
    assert "oci/        base image blobs: 2 blobs, 0 notes, 68.4 KB (70000 bytes)" in out
    assert "manifests/  validated manifests: 1 entries, 4.9 KB (5000 bytes)" in out
    assert "zipapps/    not shipyard's build cache, not pruned" in out


def test_info_shows_what_dominates_and_what_dedup_saved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """E1 and E2 both name shared.whl (10 KB): restored they are 47 KB, stored 37 KB."""
    Filled(tmp_path / "cache")
    found = cache_info(tmp_path / "cache", {}).contents
    assert (found.entries, found.logical, found.stored, found.saved) == (2, 47_000, 37_000, 10_000)
    assert [(k.kind, k.outputs, k.logical, k.stored) for k in found.kinds] == [
        ("wheel", 4, 47_000, 37_000)
    ]
    assert [(e.key, e.logical, e.own) for e in found.largest_entries] == [
        ("e1", 30_000, 20_000),
        ("e2", 17_000, 7_000),
    ]
    assert [(b.size, b.entries) for b in found.largest_blobs] == [
        (20_000, 1),
        (10_000, 2),
        (7_000, 1),
    ]
    assert main(["cache", "info", f"--cache-dir={tmp_path / 'cache'}"]) == 0
    out = capsys.readouterr().out
    assert (
        "action cache: 2 entries restore 45.9 KB, stored as 36.1 KB of blobs "
        "(identical blobs once: 9.8 KB saved, 21%)"
    ) in out
    assert "    wheel            36.1 KB stored     45.9 KB restored in 4 outputs" in out
    assert "named by 2 entries (wheel)" in out


def test_sizes_and_the_default_limit() -> None:
    assert parse_size("1M", "--max-size") == 1 << 20
    assert parse_size("10g", "--max-size") == 10 << 30
    assert parse_size("512", "--max-size") == 512
    assert cache_limit({}) == 512 << 20
    assert cache_limit({"SHIPYARD_CACHE_MAX_SIZE": "2G"}) == 2 << 30
    assert cache_limit({"SHIPYARD_CACHE_MAX_SIZE": "off"}) is None
    with pytest.raises(UsageError, match=r"SHIPYARD_CACHE_MAX_SIZE=lots: give bytes"):
        cache_limit({"SHIPYARD_CACHE_MAX_SIZE": "lots"})


def test_base_blobs_are_marked_used_when_a_build_uses_them(tmp_path: Path) -> None:
    store = blob_store({"SHIPYARD_CACHE_DIR": str(tmp_path / "cache")})
    layer = write_layer([Entry("etc/arch", data=b"amd64")], store, 1704067200)
    image = append_layer(Image(Platform.parse("linux/amd64")), layer)
    write_docker_archive(tmp_path / "base.tar", image, ["b:1"], 1704067200)
    first = load_base("docker-archive:base.tar", ["linux/amd64"], root=tmp_path, store=store)
    blobs = [x.path for x in first["linux/amd64"].image.layers]
    assert blobs and all(p.is_relative_to(store.root) for p in blobs)
    for blob in blobs:
        aged(blob, 48)
    load_base("docker-archive:base.tar", ["linux/amd64"], root=tmp_path, store=store)
    assert all(p.stat().st_mtime > time.time() - 60 for p in blobs), "used: pruned last"
