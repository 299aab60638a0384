"""The archives a zipapp build writes: for which Pythons and platforms, and their names.

With several target Pythons (project.python a list) the site is resolved for each
Python and platform: one archive runs on every one of them when all got the same
pure distributions, else each Python gets its own (`-py3.12`), universal or per
platform (`plan_archives`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard.dist import zipapp_file
from shipyard.engine.context import BuildContext
from shipyard.engine.plan import Action

if TYPE_CHECKING:  # the installers' modules are only needed to build, not to key
    from shipyard.builders.resolve import Resolution

__all__ = ["Archive", "archive_file", "plan_archives", "pythons_of"]


def pythons_of(action: Action, ctx: BuildContext) -> tuple[str, ...]:
    """The target Pythons a zipapp action resolves for: the action's, else the build's."""
    return action.pythons or (ctx.python,)


def archive_file(
    dist: Path, binary: str, version: str, python: str | None, platform: str | None
) -> Path:
    """Where a zipapp goes: `<binary>-<version>.pyz` (every platform, every Python),
    `<binary>-<version>-<os>_<arch>.pyz` (one platform), and with several target
    Pythons whose sites differ `<binary>-<version>-py3.12.pyz` (one Python, every
    platform) or `<binary>-<version>-py3.12-<os>_<arch>.pyz`."""
    return zipapp_file(dist, binary, f"{version}-py{python}" if python else version, platform)


@dataclass(frozen=True)
class Archive:
    """One archive to write: the resolution whose site it holds, every resolution it
    stands for, the Pythons it runs on, whether it is for every platform, and the
    Python its name carries (None: it runs on every target Python)."""

    resolution: Resolution
    covered: tuple[Resolution, ...]
    pythons: tuple[str, ...]
    universal: bool
    named: str | None


def _same_pure(resolutions: Sequence[Resolution]) -> bool:
    """Whether `resolutions` all got the same pure-Python distributions (a marker on a
    platform or a Python version may pull in different ones)."""
    return all(r.pure for r in resolutions) and len({r.distributions for r in resolutions}) == 1


def plan_archives(
    pythons: Sequence[str], platforms: Sequence[str], resolutions: Sequence[Resolution]
) -> list[Archive]:
    """The archives of a build resolved for every (Python, platform), Pythons outer.

    One archive for everything when every resolution got the same pure
    distributions. Otherwise per Python (none is special): one archive for every
    platform when that Python's resolutions are the same and pure, else one per
    platform; named with the Python when there are several.
    """
    if _same_pure(resolutions):
        return [Archive(resolutions[0], tuple(resolutions), tuple(pythons), True, None)]
    out: list[Archive] = []
    width = len(platforms)
    for index, python in enumerate(pythons):
        mine = tuple(resolutions[index * width : (index + 1) * width])
        named = python if len(pythons) > 1 else None
        if _same_pure(mine):
            out.append(Archive(mine[0], mine, (python,), True, named))
        else:
            out.extend(Archive(r, (r,), (python,), False, named) for r in mine)
    return out
