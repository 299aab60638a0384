"""`shipyard cache info` and `cache prune`: the library measures and prunes; this prints."""

from __future__ import annotations

import argparse
import datetime
import os
from typing import TYPE_CHECKING

from shipyard.cli._args import cache_dir

if TYPE_CHECKING:
    from shipyard.engine.cache.usage import CacheContents

__all__ = ["cache_command"]


def _sized(size: int) -> str:
    from shipyard.engine.cache.usage import human_size

    return f"{human_size(size)} ({size} bytes)" if size >= 1024 else human_size(size)


def cache_command(args: argparse.Namespace) -> int:
    """`shipyard cache prune|info`."""
    if args.action == "prune":
        return _prune(args)
    return _info(args)


def _prune(args: argparse.Namespace) -> int:
    from shipyard.engine.cache.prune import prune_to
    from shipyard.engine.cache.usage import human_size

    folder = cache_dir(args)
    pruned, limit = prune_to(folder, os.environ, args.max_size)
    print(
        f"removed {pruned.removed_entries} entries and {pruned.removed_files} other files, "
        f"{_sized(pruned.removed_bytes)}; {_sized(pruned.kept_bytes)} kept in {folder} "
        f"(pruned to {human_size(limit)})"
    )
    if pruned.shared:
        print(
            "another build is using the cache: its base image blobs (oci/) and blobs "
            "no entry names yet were kept; run `shipyard cache prune` again when none runs"
        )
    return 0


def _info(args: argparse.Namespace) -> int:
    from shipyard.engine.cache.local import DEFAULT_MAX_SIZE, MAX_SIZE_ENV
    from shipyard.engine.cache.usage import cache_info, human_size

    info = cache_info(cache_dir(args), os.environ)
    default = human_size(DEFAULT_MAX_SIZE)
    limit_text = (
        f"automatic prune off ({MAX_SIZE_ENV}={info.setting})"
        if info.limit is None
        else f"limit {human_size(info.limit)} ({MAX_SIZE_ENV}, default {default})"
    )
    print(f"{info.dir}: {_sized(info.usage.managed)} stored by builds; {limit_text}")
    for part in info.usage.parts:
        note = "" if part.pruned else ", not pruned, not counted"
        print(f"  {part.folder + '/':<12}{part.what}{note}: {part.describe()}, {_sized(part.size)}")
    last = info.last
    if last is not None:
        when = datetime.datetime.fromtimestamp(last.time).strftime("%Y-%m-%d %H:%M:%S")
        done = (
            f"under its limit of {human_size(last.limit)}"
            if last.removed_bytes is None
            else f"over its limit of {human_size(last.limit)}, removed {_sized(last.removed_bytes)}"
            + (" (another build held what it uses)" if last.shared else "")
        )
        print(f"last automatic check, after a build at {when}: {_sized(last.size)}, {done}")
    _contents(info.contents)
    return 0


def _contents(found: CacheContents) -> None:
    """What dominates the action cache: by kind, the largest entries and blobs, and what
    storing each identical blob once saves."""
    from shipyard.engine.cache.usage import human_size

    if not found.entries:
        return
    share = f", {100 * found.saved // found.logical}%" if found.logical else ""
    print(
        f"action cache: {found.entries} entries restore {human_size(found.logical)}, stored "
        f"as {human_size(found.stored)} of blobs (identical blobs once: "
        f"{human_size(found.saved)} saved{share})"
        + (f"; {human_size(found.unnamed)} in blobs no entry names" if found.unnamed else "")
    )
    print("  by kind (stored: each blob once, under the first kind naming it; as restored):")
    for kind in found.kinds:
        print(
            f"    {kind.kind:<14}{human_size(kind.stored):>10} stored  "
            f"{human_size(kind.logical):>10} restored in {kind.outputs} outputs"
        )
    print("  largest entries (as restored; freed if removed):")
    for entry in found.largest_entries:
        print(
            f"    {entry.key[:12]}  {entry.made:<28}{human_size(entry.logical):>10}  "
            f"{human_size(entry.own):>10}"
        )
    print("  largest blobs:")
    for blob in found.largest_blobs:
        print(
            f"    {blob.sha256[:12]}  {human_size(blob.size):>10}  named by {blob.entries} "
            f"entries ({', '.join(blob.kinds)})"
        )
