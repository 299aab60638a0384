"""Size budgets: each output measured against `size: {kind: {min, max}}` of its binary.

What is measured, per output kind:

- ``wheel``: the wheel file (the binary's source's wheel, when the binary declares
  the wheel output);
- ``zipapp``: each ``.pyz`` (one per platform when the zipapp is per platform);
- ``image``: per platform, what a pull downloads: the config plus the compressed
  layers, the sum of the platform manifest's descriptor sizes.

`check_sizes` is a pure function of the binaries and the build's results (and the
image layouts they name); `shipyard build` prints its findings as warnings, and
release validate fails on them (`shipyard.release.building`). It lives in
the engine, beside the results it reads, so a build's warning costs no import of
the release pipeline, and reads an image layout (and imports oci) only for a
binary with an image budget and an image among the results.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from shipyard.artifacts import Artifact, select
from shipyard.errors import UsageError

if TYPE_CHECKING:
    from shipyard.engine.scheduler import Result
    from shipyard.manifest import Binary, SizeBudget
    from shipyard.oci.model import Descriptor

__all__ = ["Measured", "SizeFinding", "check_sizes", "format_size", "measure"]

Bound = Literal["min", "max"]

_DECIMAL = (("GB", 1000**3), ("MB", 1000**2), ("kB", 1000), ("B", 1))
_BINARY = (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024), ("B", 1))


@dataclass(frozen=True)
class Measured:
    """One measured output: its file (an image's layout folder), platform and size."""

    path: Path
    platform: str  # "any", a wheel's tags, or an OCI platform
    size: int


@dataclass(frozen=True)
class SizeFinding:
    """An output outside its budget: what, how big, and the limit it breaks."""

    binary: str
    kind: str  # wheel, zipapp or image
    bound: Bound  # which side of the budget it breaks
    size: int  # bytes measured
    limit: int  # bytes allowed (at most for max, at least for min)
    path: Path
    platform: str

    @property
    def key(self) -> str:
        """The manifest key that sets the limit, e.g. binaries.meshctl.size.zipapp.max."""
        return f"binaries.{self.binary}.size.{self.kind}.{self.bound}"

    def message(self, root: Path | None = None) -> str:
        """One line for people, with the path relative to `root` when inside it."""
        path = self.path
        if root is not None and path.is_relative_to(root):
            path = path.relative_to(root)
        what = f"{self.binary} {self.kind} {path}"
        if self.kind == "image" or (self.kind == "zipapp" and self.platform != "any"):
            what += f" ({self.platform})"
        size, limit = _pair(self.size, self.limit)
        side = "over its size budget of" if self.bound == "max" else "under its size budget of"
        return f"{what} is {size}, {side} {limit} ({self.key})"


def _unit(size: int) -> tuple[str, int]:
    """The unit `size` reads best in: powers of 1024 for a size written in them (40MiB)."""
    units = _BINARY if size % 1024 == 0 and size % 1000 != 0 else _DECIMAL
    return next(((n, s) for n, s in units if size >= s), units[-1])


def format_size(size: int, *, like: int | None = None) -> str:
    """`41.2 MB`, `40 MB`, `1.5 GiB`: in the unit `like` (default `size`) reads best in.

    A size measured against a limit is shown in the limit's unit, so the two
    compare at a glance: one decimal for a measurement, up to two for a limit.
    """
    name, scale = _unit(size if like is None else like)
    if scale == 1:
        return f"{size} B"
    text = f"{size / scale:.2f}" if like is None else f"{size / scale:.1f}"
    return f"{text.rstrip('0').rstrip('.')} {name}"


def _pair(size: int, limit: int) -> tuple[str, str]:
    """The measured size and the limit as shown together: in the limit's unit, or in
    bytes when that unit would round the limit or hide which side the size is on."""
    shown, bound = format_size(size, like=limit), format_size(limit)
    scale = _unit(limit)[1]
    measured, allowed = float(shown.split()[0]), float(bound.split()[0])
    exact = round(allowed * scale) == limit
    if not exact or measured == allowed or (measured > allowed) != (size > limit):
        return f"{size} bytes", f"{limit} bytes"
    return shown, bound


def _image_sizes(artifact: Artifact) -> tuple[Measured, ...]:
    """Per platform of the layout `artifact` names: config plus layers, as pulled."""
    from shipyard.oci.layout import index_entries, layout_tops, manifest_blobs, read_blob
    from shipyard.oci.mediatypes import is_index, is_manifest
    from shipyard.oci.model import OCIError

    layout = artifact.path.parent
    found: list[Measured] = []

    def visit(desc: Descriptor) -> None:
        if is_index(desc.media_type):
            for entry in index_entries(read_blob(layout, desc)):
                visit(entry)
        elif is_manifest(desc.media_type):
            platform = str(desc.platform) if desc.platform else "?/?"
            if platform == "unknown/unknown":
                return  # an attestation, not something that runs
            blobs = manifest_blobs(read_blob(layout, desc))
            found.append(Measured(layout, platform, sum(b.size for b in blobs)))

    try:
        for top in layout_tops(layout):
            visit(top)
    except (OCIError, ValueError) as exc:
        raise UsageError(f"{exc}; rebuild the image to measure its size") from None
    return tuple(found)


def measure(artifact: Artifact) -> tuple[Measured, ...]:
    """The sizes a budget is checked against for one wheel, zipapp or image artifact."""
    if artifact.kind == "image":
        return _image_sizes(artifact)
    return (Measured(artifact.path, artifact.platform, artifact.size),)


def _outside(budget: SizeBudget, size: int) -> tuple[Bound, int] | None:
    if budget.max is not None and size > budget.max:
        return "max", budget.max
    if budget.min is not None and size < budget.min:
        return "min", budget.min
    return None


def _outputs(binary: Binary, kind: str, results: Sequence[Result]) -> tuple[Artifact, ...]:
    if kind == "wheel":
        # A wheel belongs to its source (binary ""): the wheel action names its binaries.
        return tuple(
            a
            for r in results
            if r.action.kind == "wheel" and binary.name in r.action.binaries
            for a in select(r.outputs, kind="wheel")
        )
    return select((a for r in results for a in r.outputs), kind=kind, binary=binary.name)


def check_sizes(binaries: Iterable[Binary], results: Iterable[Result]) -> tuple[SizeFinding, ...]:
    """Every output of `results` outside its binary's budget, in binary order.

    Only the kinds a binary declares as outputs are checked (a wheel built only as
    an input of its zipapp is not shipped). Results without outputs (failed,
    skipped) contribute nothing; cached ones count like built ones.
    """
    done = tuple(results)
    findings: list[SizeFinding] = []
    for binary in binaries:
        for kind, budget in binary.size.items():
            if kind not in binary.outputs:
                continue
            for artifact in _outputs(binary, kind, done):
                for measured in measure(artifact):
                    broken = _outside(budget, measured.size)
                    if broken is not None:
                        bound, limit = broken
                        findings.append(
                            SizeFinding(
                                binary.name,
                                kind,
                                bound,
                                measured.size,
                                limit,
                                measured.path,
                                measured.platform,
                            )
                        )
    return tuple(findings)
