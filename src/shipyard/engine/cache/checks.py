"""What a cache entry may propose, checked: a cache entry (a shared cache folder, or a
registry repository anyone with push rights fills) is untrusted input.

An output's path must be relative, normalised, not hidden and one the action
declares (`declared_outputs`); its mode 0644 or 0755; its sha256 64 lowercase hex
digits; its size a byte count; its artifact one the action could have made. Anything
else raises `RefusedEntry`: the caller logs it and treats the entry as a miss.
"""

from __future__ import annotations

import fnmatch
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from shipyard.artifacts import ANY, Artifact
from shipyard.dist import output_patterns
from shipyard.engine.context import BuildContext
from shipyard.engine.plan import Action

__all__ = [
    "Declared",
    "RefusedEntry",
    "checked_description",
    "checked_mode",
    "checked_parts",
    "checked_path",
    "checked_sha256",
    "checked_size",
    "declared_outputs",
    "stored_mode",
]

_SHA256 = re.compile(r"[0-9a-f]{64}")
_MODES = (0o644, 0o755)  # never setuid, setgid, sticky, or writable by others
_MAX_PARTS = 100_000  # far more than any tar a build writes has members


class RefusedEntry(Exception):
    """A cache entry a restore will not use: a miss, logged with this reason.

    `blob` names a stored blob found to hold other bytes than its digest says.
    """

    def __init__(self, reason: str, blob: Path | None = None) -> None:
        super().__init__(reason)
        self.blob = blob


@dataclass(frozen=True)
class Declared:
    """The repository-relative paths an action may write, as glob patterns, and the
    action itself (whose artifacts alone a restore accepts; any, when None).

    A pattern is a tuple of path parts, each matched against one part (fnmatch,
    so a `*` never crosses a `/`); a last part `**` matches one or more parts.
    """

    patterns: tuple[tuple[str, ...], ...]
    action: Action | None = None

    @classmethod
    def dist(cls) -> Declared:
        """Anything under dist/: for callers that know no action."""
        return cls((("dist", "**"),))

    def allows(self, parts: Sequence[str]) -> bool:
        """Whether the path made of `parts` matches one of the patterns."""
        return any(_matches(pattern, parts) for pattern in self.patterns)

    def owns(self, artifact: Artifact) -> bool:
        """Whether `artifact` is one the action could have made (a cache entry may lie)."""
        action = self.action
        if action is None:
            return True
        kind = artifact.kind == action.kind or artifact.kind.startswith(action.kind + "-")
        if action.kind == "wheel":
            return kind and not artifact.binary
        if action.kind == "test":
            return kind and artifact.binary == action.project and artifact.platform == ANY
        platform = artifact.platform == ANY or artifact.platform in action.platforms
        return kind and platform and artifact.binary in action.binaries

    def __str__(self) -> str:
        return ", ".join("/".join(p) for p in self.patterns) or "nothing"


def _matches(pattern: tuple[str, ...], parts: Sequence[str]) -> bool:
    if pattern and pattern[-1] == "**":
        head = pattern[:-1]
        if len(parts) <= len(head):
            return False
    elif len(parts) != len(pattern):
        return False
    else:
        head = pattern
    return all(fnmatch.fnmatchcase(part, want) for part, want in zip(parts, head, strict=False))


def declared_outputs(action: Action, ctx: BuildContext) -> Declared:
    """Where `action` may write: the dist/ paths its kind's builder publishes to
    (`shipyard.dist.output_patterns`). A restore writes nothing else, whatever a
    cache entry names.
    """
    try:
        dist = ctx.dist.relative_to(ctx.root).parts
    except ValueError:
        return Declared(())  # outputs outside the checkout: none is restored
    binary = action.binaries[0] if action.binaries else None
    if action.kind == "test":
        binary = f"{action.project}/{action.stage}"
    return Declared(tuple((*dist, *p) for p in output_patterns(action.kind, binary)), action)


def checked_path(value: object, declared: Declared) -> tuple[str, ...]:
    """The parts of an entry's output path, if it is relative, normalised, has no
    hidden part (.git, .tmp-*) and is one `declared` allows; else RefusedEntry."""
    if not isinstance(value, str) or not value or "\0" in value:
        raise RefusedEntry(f"output path {value!r} is not a path")
    try:
        value.encode("utf-8")  # strict: a lone surrogate is no file name
    except UnicodeEncodeError:
        raise RefusedEntry(f"output path {value!r} is not UTF-8") from None
    if value.startswith("/"):
        raise RefusedEntry(f"output path {value!r} is absolute")
    parts = tuple(value.split("/"))
    if any(part in ("", ".", "..") for part in parts):
        raise RefusedEntry(f"output path {value!r} is not normalised (an empty, . or .. part)")
    if any(part.startswith(".") for part in parts):
        raise RefusedEntry(f"output path {value!r} has a hidden part")
    if not declared.allows(parts):
        raise RefusedEntry(f"output path {value!r} is not one of the action's ({declared})")
    return parts


def checked_sha256(value: object) -> str:
    """`value` if it is a sha256 in 64 lowercase hex digits; else RefusedEntry."""
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise RefusedEntry(f"sha256 {value!r} is not 64 lowercase hex digits")
    return value


def checked_size(value: object) -> int:
    """`value` if it is a byte count; else RefusedEntry."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise RefusedEntry(f"size {value!r} is not a byte count")
    return value


def checked_parts(value: object, size: int) -> tuple[tuple[str, int], ...]:
    """The pieces an output is stored as, each (sha256, size) (`shipyard.engine.cache.pieces`):
    `value` if it is a list of [sha256, size] pairs whose sizes add up to `size`; an empty
    tuple when there is none (the output is one blob); else RefusedEntry."""
    if value is None:
        return ()
    if not isinstance(value, list) or not 0 < len(value) <= _MAX_PARTS:
        raise RefusedEntry(f"its parts are not a list of at most {_MAX_PARTS} pieces")
    parts: list[tuple[str, int]] = []
    for part in value:
        if not isinstance(part, list) or len(part) != 2:
            raise RefusedEntry(f"part {part!r} is not a [sha256, size] pair")
        parts.append((checked_sha256(part[0]), checked_size(part[1])))
    if sum(length for _, length in parts) != size:
        raise RefusedEntry(f"its parts do not add up to its size of {size} bytes")
    return tuple(parts)


def checked_description(value: object, declared: Declared | None = None) -> Artifact:
    """The artifact `value` describes (kind, binary, platform, metadata; no path or
    bytes yet) if `declared`'s action could have made it; else RefusedEntry."""
    try:
        artifact = Artifact.described(value, Path(), "", 0)
    except ValueError as exc:
        raise RefusedEntry(f"the artifact description: {exc}") from None
    if declared is not None and not declared.owns(artifact):
        assert declared.action is not None
        raise RefusedEntry(
            f"it describes a {artifact.kind} of {artifact.binary or 'no binary'!r} for "
            f"{artifact.platform}, which {declared.action.id} does not make"
        )
    return artifact


def checked_mode(value: object) -> int:
    """`value` if it is 0o644 or 0o755 (what a store records); else RefusedEntry."""
    if not isinstance(value, int) or isinstance(value, bool) or value not in _MODES:
        shown = f"{value:o}" if isinstance(value, int) else repr(value)
        raise RefusedEntry(f"mode {shown} is neither 644 nor 755")
    return value


def stored_mode(path: Path) -> int:
    """The mode a cache records for an output: 0o755 if its owner may run it, else 0o644."""
    return 0o755 if path.stat().st_mode & stat.S_IXUSR else 0o644
