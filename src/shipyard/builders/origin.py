"""The repository's own projects are installed from the wheels shipyard built, never from
an index: the backstop against dependency confusion.

The plan hands a zipapp or an image the wheel of every in-repo project its binary needs
(through plain dependencies and extras alike). Should the installer still put in a
distribution named like a project of the repository that is not one of those wheels (a
third-party package requiring it, metadata the graph cannot see), the copy came from an
index, perhaps an attacker's: the build fails, naming the project and the requirements that
reached it, before anything is written.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from shipyard.builders.resolve import Locked, Resolution
from shipyard.engine.context import BuildContext
from shipyard.engine.plan import Action
from shipyard.errors import BuildError

if TYPE_CHECKING:
    from shipyard.workspace import Workspace

__all__ = ["from_repository", "resolve_site"]

# The extra a Requires-Dist line belongs to, as wheel metadata writes it.
_EXTRA = re.compile(r"""\bextra\s*==\s*['"]([^'"]+)['"]""")

_Node = tuple[str, str]  # (canonical distribution name, extra or "")


def _supplied(wheels: Sequence[Path]) -> set[str]:
    names = set()
    for wheel in wheels:
        try:
            names.add(str(parse_wheel_filename(wheel.name)[0]))
        except InvalidWheelFilename:
            continue
    return names


def _requires(site: Path) -> dict[str, list[tuple[str, str, tuple[str, ...]]]]:
    """For each installed distribution: (the extra it is under or "", name, extras asked)
    of each of its Requires-Dist lines."""
    found: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {}
    for dist_info in sorted(site.glob("*.dist-info")):
        metadata = dist_info / "METADATA"
        if not metadata.is_file():
            continue
        lines = metadata.read_text(encoding="utf-8", errors="replace").split("\n\n", 1)[0]
        name, edges = "", []
        for line in lines.splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "name":
                name = str(canonicalize_name(value.strip()))
            elif key.lower() == "requires-dist":
                try:
                    req = Requirement(value.strip())
                except InvalidRequirement:
                    continue
                under = _EXTRA.search(str(req.marker or ""))
                extra = str(canonicalize_name(under[1])) if under else ""
                asked = tuple(sorted(str(canonicalize_name(e)) for e in req.extras))
                edges.append((extra, str(canonicalize_name(req.name)), asked))
        if name:
            found[name] = edges
    return found


def _path(site: Path, start: str, extras: Sequence[str], target: str) -> str:
    """The requirements from the binary's own distribution (with its `extras`) down to
    `target`, as "app[plus] -> lib -> target"; just `target` when none can be traced."""
    requires = _requires(site)
    seeds = [(start, ""), *((start, str(canonicalize_name(e))) for e in extras)]
    parent: dict[_Node, _Node | None] = dict.fromkeys(seeds)
    queue = deque(seeds)
    while queue:
        node = queue.popleft()
        if node[0] == target:
            hops: list[str] = []
            here: _Node | None = node
            while here is not None:
                shown = f"{here[0]}[{here[1]}]" if here[1] else here[0]
                if not hops or hops[-1].partition("[")[0] != here[0]:
                    hops.append(shown)
                here = parent[here]
            return " -> ".join(reversed(hops))
        for extra, name, asked in requires.get(node[0], ()):
            if extra not in ("", node[1]):
                continue
            for nxt in ((name, ""), *((name, e) for e in asked)):
                if nxt not in parent:
                    parent[nxt] = node
                    queue.append(nxt)
    return target


def from_repository(
    resolution: Resolution,
    wheels: Sequence[Path],
    workspace: Workspace | None,
    *,
    action: str,
    extras: Sequence[str] = (),
    log: Path | None = None,
) -> Resolution:
    """`resolution`, once checked that every distribution in it named like a project of
    the `workspace` is one of `wheels` (the binary's own first, then its in-repo
    libraries'). A BuildError otherwise, naming the project and the path of requirements
    from the binary (with its `extras`) that reached it."""
    in_repo: Mapping[str, Path] = workspace.names() if workspace is not None else {}
    supplied = _supplied(wheels)
    stray = [
        d
        for d in resolution.distributions
        if canonicalize_name(d.name) in in_repo and canonicalize_name(d.name) not in supplied
    ]
    if not stray:
        return resolution
    dist = stray[0]
    name = str(canonicalize_name(dist.name))
    own = next(iter(_supplied(wheels[:1])), name)
    reached = _path(resolution.site, own, extras, name)
    more = f" (and {', '.join(d.name for d in stray[1:])})" if len(stray) > 1 else ""
    raise BuildError(
        action,
        f"{dist.name} {dist.version}{more} was installed from an index for "
        f"{resolution.platform}, but `{name}` is a project of this repository "
        f"({in_repo[name]}); it was reached through {reached}. The repository's projects "
        "ship only from the wheels shipyard builds of them: name it in [project].dependencies "
        "or [project.optional-dependencies] of a project the binary installs (shipyard then "
        "builds it), or rename the project of the repository",
        log=log,
    )


def resolve_site(
    resolver: Callable[..., Resolution],
    action: Action,
    ctx: BuildContext,
    wheels: Sequence[Path],
    target: tuple[str, str],
    dest: Path,
    *,
    env: Mapping[str, str],
    log: Path,
    requirements: Path | Locked | None,
) -> Resolution:
    """`resolver`'s site of `wheels` (the binary's own first) with the action's extras,
    for `target` (Python, platform) in `dest`, checked by `from_repository` to hold the
    repository's projects from those wheels only, before anything is built from it."""
    python, platform = target
    resolution = resolver(
        wheels,
        platform,
        python,
        dest,
        env=env,
        log=log,
        requirements=requirements,
        extras=action.extras,
    )
    return from_repository(
        resolution, wheels, ctx.workspace, action=action.id, extras=action.extras, log=log
    )
