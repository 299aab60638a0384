"""Sizes written by people: one grammar for the manifest's size budgets, the cache's
limit and `--max-size`.

`kB`, `MB`, `GB`, `TB` are powers of 1000 and `KiB`, `MiB`, `GiB`, `TiB` powers of
1024, as their names say; a bare `K`, `M`, `G` or `T` is a power of 1024, as `du`,
`docker` and `ulimit` read it. So `10MB` is 10,000,000 bytes wherever it is written,
and `10M` is 10,485,760. Case does not matter; a fraction may come before a unit
(`1.5GiB`).
"""

from __future__ import annotations

import re

__all__ = ["parse_size"]

_UNITS = {
    "B": 1,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
    "KIB": 1 << 10,
    "MIB": 1 << 20,
    "GIB": 1 << 30,
    "TIB": 1 << 40,
    "K": 1 << 10,
    "M": 1 << 20,
    "G": 1 << 30,
    "T": 1 << 40,
}
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?) ?([A-Za-z]*)")


def parse_size(text: str, *, bare: bool = False) -> int:
    """Bytes in a size such as `40MB`, `1.5GiB`, `512KiB` or `10G`; with `bare`, a
    number alone is bytes. ValueError names the fix."""
    found = _SIZE.fullmatch(text.strip())
    unit = found.group(2).upper() if found else ""
    if found is None or (unit not in _UNITS and (unit or not bare)):
        raise ValueError(
            "write a size such as 40MB, 512KiB, 1.5GiB or 10G "
            "(B, kB, MB, GB, TB; KiB, MiB, GiB, TiB; K, M, G, T as powers of 1024)"
        )
    return int(float(found.group(1)) * _UNITS.get(unit, 1))
