"""What must hold across a binary's keys, checked once the defaults are merged in.

Each key may be right on its own and wrong with another: an image for a macOS platform,
variants of an image built from a Dockerfile, a protected hub that is none of the hubs,
an extra the project does not declare, a size budget whose min passes its max, compiled
zipapps for several Pythons, a variant named like the image of another Python. Each
problem is placed where the binary writes the key, else where the defaults do, else at
the binary's name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from shipyard.errors import Location, Problem
from shipyard.manifest._report import dotted, shown
from shipyard.manifest._types import IMAGE_PLATFORMS, Binary
from shipyard.manifest._yaml import KeyPath, Positions

__all__ = ["check_binary", "check_compile", "check_pythons", "variant_clash"]

_Place = Callable[..., Location]
"""Where a binary's problem goes: the first of the key paths written in the file."""


def _placer(positions: Positions, at: KeyPath) -> _Place:
    """Places the problems of the binary at `at`: the value of the first key written,
    else the binary's name."""

    def where(*keys: KeyPath) -> Location:
        found = next((k for k in keys if positions.has(k)), at)
        return positions.node(found).value if found != at else positions.node(at).key

    return where


def _undeclared_extras(binary: Binary) -> list[str]:
    """The binary's extras its project does not declare (none when they are dynamic or
    the pyproject cannot be read: the wheel build reports that)."""
    if not binary.extras:
        return []
    import tomllib

    from packaging.utils import canonicalize_name

    from shipyard import _toml

    try:
        project = _toml.loads((binary.source / "pyproject.toml").read_text()).get("project", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return []
    if not isinstance(project, dict) or "optional-dependencies" in project.get("dynamic", []):
        return []
    declared = project.get("optional-dependencies", {})
    names = {canonicalize_name(n) for n in declared} if isinstance(declared, dict) else set()
    return [e for e in binary.extras if canonicalize_name(e) not in names]


def check_binary(binary: Binary, positions: Positions, problems: list[Problem]) -> None:
    """What holds across keys, checked once defaults are merged in."""
    at = ("binaries", binary.name)
    where = _placer(positions, at)
    _check_platforms(binary, where, problems)
    _check_dockerfile_variants(binary, positions, where, problems)
    _check_protected(binary, where, problems)
    missing = _undeclared_extras(binary)
    if missing:
        problems.append(
            Problem(
                where((*at, "extras")),
                dotted((*at, "extras")),
                f"{binary.source / 'pyproject.toml'} declares no extra {shown(missing[0])}",
                "add it under [project.optional-dependencies], or fix the name",
            )
        )
    for kind, budget in binary.size.items():
        if budget.min is not None and budget.max is not None and budget.min > budget.max:
            problems.append(
                Problem(
                    where((*at, "size", kind), ("defaults", "size", kind)),
                    dotted((*at, "size", kind)),
                    f"the {kind} size budget's min is larger than its max",
                    "make min at most max",
                )
            )


def _check_platforms(binary: Binary, where: _Place, problems: list[Problem]) -> None:
    """The image is built for Linux platforms only."""
    at = ("binaries", binary.name)
    foreign = [p for p in binary.image.platforms if p not in IMAGE_PLATFORMS]
    if "image" in binary.outputs and foreign:
        # image.platforms is Linux by its type, so these came from the binary's platforms.
        linux = [p for p in binary.image.platforms if p in IMAGE_PLATFORMS]
        example = ", ".join(linux or ("linux/amd64", "linux/arm64"))
        problems.append(
            Problem(
                where((*at, "platforms"), ("defaults", "platforms")),
                dotted((*at, "image", "platforms")),
                f"{binary.name}'s image would be built for {', '.join(foreign)}, "
                "but images are Linux only (macOS and Windows are zipapp platforms)",
                f"set image.platforms to the Linux ones, e.g. [{example}]",
            )
        )


def _check_dockerfile_variants(
    binary: Binary, positions: Positions, where: _Place, problems: list[Problem]
) -> None:
    """An image built from a Dockerfile declares no variants: only the daemonless
    builder builds them."""
    at = ("binaries", binary.name)
    declared = [n for n, v in binary.image.variants.items() if v.python is None]
    if "image" in binary.outputs and binary.image.dockerfile and declared:
        mine = positions.has((*at, "image", "variants"))
        problems.append(
            Problem(
                where((*at, "image", "variants"), ("defaults", "image", "variants")),
                dotted((*at, "image", "variants")),
                f"{binary.name}'s image is built from a Dockerfile (image.dockerfile), which "
                f"cannot take variants ({', '.join(sorted(declared))}): only the daemonless "
                "builder builds them",
                "remove image.variants (or image.dockerfile), or build each variant from its "
                "own Dockerfile as another binary"
                if mine
                else "defaults.image.variants apply to every binary: move them to the "
                "binaries whose images are built without a Dockerfile",
            )
        )


def _check_protected(binary: Binary, where: _Place, problems: list[Problem]) -> None:
    """Each protected hub of the image is one of its hubs."""
    at = ("binaries", binary.name)
    unknown = [h for h in binary.image.protected if h not in binary.image.hubs]
    if unknown:
        problems.append(
            Problem(
                where((*at, "image", "protected"), ("defaults", "image", "protected")),
                dotted((*at, "image", "protected")),
                f"protected hub {shown(unknown[0])} is not one of {binary.name}'s hubs",
                "list it under image.hubs too, or write it exactly as hubs does",
            )
        )


def check_compile(
    binary: Binary, pythons: Sequence[str], positions: Positions, problems: list[Problem]
) -> None:
    """A compiled zipapp holds bytecode for one Python: not for a project of several."""
    if "zipapp" in binary.outputs and binary.zipapp.compile and len(pythons) > 1:
        at = ("binaries", binary.name, "zipapp", "compile")
        key = at if positions.has(at) else ("defaults", "zipapp", "compile")
        problems.append(
            Problem(
                positions.node(key).value if positions.has(key) else positions.node(at[:2]).key,
                dotted(at),
                f"zipapp.compile ships bytecode for one Python, but project.python lists "
                f"{', '.join(pythons)}",
                "set compile: false (Python compiles on first import), or list one Python",
            )
        )


def variant_clash(
    name: str, positions: Positions, problems: list[Problem]
) -> Callable[[str], None]:
    """What to call for a declared variant of binary `name` whose name is taken by the
    image of another target Python: it records the problem."""

    def clash(variant: str) -> None:
        key: KeyPath = ("binaries", name, "image", "variants", variant)
        if not positions.has(key):
            key = ("defaults", "image", "variants", variant)
        problems.append(
            Problem(
                positions.node(key).key
                if positions.has(key)
                else positions.node(("binaries", name)).key,
                dotted(("binaries", name, "image", "variants", variant)),
                f"variant {shown(variant)} is the name of the image for another target "
                "Python (project.python lists several and image.base uses ${python})",
                "rename the variant",
            )
        )

    return clash


def check_pythons(pythons: Sequence[str], positions: Positions, problems: list[Problem]) -> None:
    """A target Python listed twice is a mistake (its archives and images would collide)."""
    seen: set[str] = set()
    for index, version in enumerate(pythons):
        if version in seen:
            key: KeyPath = ("project", "python", index)
            node = positions.node(key if positions.has(key) else ("project", "python"))
            problems.append(
                Problem(
                    node.value,
                    dotted(key),
                    f"Python {version} is listed twice",
                    "list each target Python once",
                )
            )
        seen.add(version)
