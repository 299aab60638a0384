"""Environment markers compared by what they select, not by how they are spelled.

uv rewrites markers when it records them (`python_version >= "3.8"` becomes
`python_full_version >= '3.8'`, clauses are reordered and simplified), so two markers are
taken as equal when they agree on every environment of a grid of interpreters and
platforms that covers the boundaries markers are written against in practice.
"""

from __future__ import annotations

import itertools
import re
from functools import cache

from packaging.markers import Marker
from packaging.specifiers import SpecifierSet

__all__ = ["equivalent", "never"]

_PYTHONS = (
    "2.7.18",
    *(f"3.{minor}.{micro}" for minor in range(0, 17) for micro in (0, 9)),
    "4.0.0",
)
_PLATFORMS = (
    {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
     "platform_machine": "x86_64"},
    {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
     "platform_machine": "aarch64"},
    {"sys_platform": "darwin", "platform_system": "Darwin", "os_name": "posix",
     "platform_machine": "arm64"},
    {"sys_platform": "darwin", "platform_system": "Darwin", "os_name": "posix",
     "platform_machine": "x86_64"},
    {"sys_platform": "win32", "platform_system": "Windows", "os_name": "nt",
     "platform_machine": "AMD64"},
    {"sys_platform": "emscripten", "platform_system": "Emscripten", "os_name": "posix",
     "platform_machine": "wasm32"},
)  # fmt: skip
_IMPLEMENTATIONS = (("cpython", "CPython"), ("pypy", "PyPy"))
_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']*)["']|["']([^"']*)["']\s*==\s*extra""")


@cache
def _environments(extras: frozenset[str]) -> tuple[dict[str, str], ...]:
    out = []
    for python, platform, (impl, impl_name), extra in itertools.product(
        _PYTHONS, _PLATFORMS, _IMPLEMENTATIONS, sorted(extras | {""})
    ):
        out.append(
            {
                **platform,
                "python_full_version": python,
                "python_version": ".".join(python.split(".")[:2]),
                "implementation_name": impl,
                "implementation_version": python,
                "platform_python_implementation": impl_name,
                "platform_release": "",
                "platform_version": "",
                "extra": extra,
            }
        )
    return tuple(out)


@cache
def _table(text: str, extras: frozenset[str]) -> tuple[bool, ...]:
    marker = Marker(text)
    return tuple(marker.evaluate(env) for env in _environments(extras))


def _extras(*texts: str) -> frozenset[str]:
    return frozenset(a or b for text in texts for a, b in _EXTRA.findall(text))


def equivalent(a: Marker | None, b: Marker | None) -> bool:
    """Whether two markers (None: always true) select the same environments of the grid."""
    left, right = str(a) if a else "", str(b) if b else ""
    if left == right:
        return True
    extras = _extras(left, right)
    everywhere = (True,) * len(_environments(extras))
    return (_table(left, extras) if left else everywhere) == (
        _table(right, extras) if right else everywhere
    )


def never(marker: Marker | None, requires_python: SpecifierSet | None) -> bool:
    """Whether `marker` is false on every grid environment `requires_python` allows."""
    if marker is None:
        return False
    text = str(marker)
    extras = _extras(text)
    table = _table(text, extras)
    for env, value in zip(_environments(extras), table, strict=True):
        if value and (
            requires_python is None or requires_python.contains(env["python_full_version"])
        ):
            return False
    return True
