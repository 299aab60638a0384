"""Build identity read once at the edge: version, revision, dirty flag and the clock.

Everything downstream takes a `Stamp` instead of asking git or the clock again, so
one build sees one version and one timestamp (the basis of reproducibility).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from shipyard import git
from shipyard.errors import UsageError

__all__ = [
    "ZIP_EPOCH",
    "Stamp",
    "choose_version",
    "git_outputs",
    "read_stamp",
    "tag_match",
    "tag_version",
    "version_from_describe",
    "work_tree_changes",
]

# Zip cannot store times before 1980; a clock before that is clamped here.
ZIP_EPOCH = 315532800


@dataclass(frozen=True)
class Stamp:
    """The version, git revision, dirty flag and clock of one build."""

    version: str
    revision: str | None
    dirty: bool
    epoch: int
    # The tracked paths with changes, when this stamp was read from the work tree
    # (`read_stamp`): `engine.stamps.input_stamps` reuses them instead of asking again.
    changed: tuple[str, ...] | None = field(default=None, compare=False, repr=False)
    # With `version: git`: (tag prefix, git describe's output or None, commit count) of
    # the revision, so `engine.stamps.input_stamps` knows when no tag can describe any
    # commit before it and asks git nothing more about tags.
    described: tuple[str, str | None, int] | None = field(default=None, compare=False, repr=False)

    @property
    def created(self) -> str:
        """The clock as RFC 3339 UTC, as OCI annotations want it."""
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.epoch))

    @property
    def tag(self) -> str:
        """The version as a valid image tag (`+` is not allowed there)."""
        return self.version.replace("+", "-")


def git_outputs(root: Path, *commands: tuple[str, ...], raw: bool = False) -> list[str | None]:
    """Each git command's output (None where it failed), the commands run side by side:
    every build asks, and git's start-up is most of what a no-op build waits for."""
    running = [git.start(root, *args) for args in commands]
    outputs: list[str | None] = []
    for process in running:
        if process is None:
            outputs.append(None)
            continue
        stdout = process.communicate()[0].decode(errors="surrogateescape")
        text = stdout if raw else stdout.strip()
        outputs.append(text if process.returncode == 0 else None)
    return outputs


_DESCRIBE = re.compile(r"^(?P<tag>.+)-(?P<distance>\d+)-g(?P<sha>[0-9a-f]+)$")
# A tag's version after a prefix naming the project or the tree: python-v0.5.3,
# acme-cli/v1.2.3, release-2024.1 (the version starts at the first digit after the last
# '/', '-' or '_' that a 'v' or nothing follows).
_PREFIXED = re.compile(r"^(?:.*[/_-])?v?(?P<version>[0-9][^/]*)$")


def tag_match(prefix: str) -> tuple[str, ...]:
    """`git describe` options that match the version tags named with `prefix`: the
    version (or 'v' and the version) right after it, so `python-` reads python-1.9.0
    and not a package's python-devui-1.0.0 tag; any tag with a digit without one."""
    if not prefix:
        return ("--match", "*[0-9]*")
    return ("--match", f"{prefix}[0-9]*", "--match", f"{prefix}v[0-9]*")


def tag_version(tag: str, prefix: str = "") -> Version | None:
    """The PEP 440 version a tag names: `prefix` (GoReleaser's monorepo tag_prefix,
    given) and a 'v' stripped; without a prefix, a plain version (1.2.3, v1.2.3) or one
    after a prefix such as `python-v` or `<project>/v`. None when it names none."""
    if prefix:
        if not tag.startswith(prefix):
            return None
        tag = tag[len(prefix) :]
    text = tag[1:] if tag[:1] in "vV" else tag
    with contextlib.suppress(InvalidVersion):
        return Version(text)
    match = _PREFIXED.match(tag) if not prefix else None
    if match:
        with contextlib.suppress(InvalidVersion):
            return Version(match["version"])
    return None


def version_from_describe(
    describe: str | None, sha: str, count: int, dirty: bool, prefix: str = ""
) -> str:
    """PEP 440 version from `git describe --tags --long` output (tags named with
    `prefix`, see `tag_version`).

    At a tag: the tag. After it: the next patch release as a dev version with the
    revision as local label (1.4.0 -> 1.4.1.dev3+g1a2b3c4). No tag: 0.0.0.devN.
    """
    local = [f"g{sha}"] + (["dirty"] if dirty else [])
    tagged = _tagged(describe, prefix)
    if tagged is None:
        return f"0.0.0.dev{count}+{'.'.join(local)}"
    base, distance = tagged
    if distance == 0:
        return str(base) + ("+dirty" if dirty else "")
    release = list(base.release) + [0] * (3 - len(base.release))
    release[-1] += 1
    return f"{'.'.join(map(str, release))}.dev{distance}+{'.'.join(local)}"


def _tagged(describe: str | None, prefix: str = "") -> tuple[Version, int] | None:
    """The tag's version and the distance from it in `git describe` output, if both are there."""
    match = _DESCRIBE.match(describe or "")
    if not match:
        return None
    version = tag_version(match["tag"], prefix)
    return None if version is None else (version, int(match["distance"]))


def _validate(version: str, source: str) -> str:
    try:
        return str(Version(version))
    except InvalidVersion:
        raise UsageError(
            f"{source}: '{version}' is not a PEP 440 version; use e.g. 1.4.0 or 1.4.0rc1"
        ) from None


def choose_version(
    declared: str, env: Mapping[str, str], override: str | None = None, *, snapshot: bool = False
) -> tuple[str, str]:
    """The version to stamp and where it was given: the one rule of `build` and `release`.

    A snapshot always takes git describe (as a dev version). Otherwise `override`
    (--version), then $VERSION, then the manifest's `project.version` (a literal,
    or `git`). Returns (version, source); the version is `git` for git describe.
    """
    if snapshot:
        return "git", "a snapshot"
    if override:
        return override, "--version"
    if env.get("VERSION"):
        return env["VERSION"], "$VERSION"
    return declared, "project.version in binaries.yaml"


def read_stamp(
    root: Path,
    declared: str,
    env: Mapping[str, str],
    override: str | None = None,
    *,
    snapshot: bool = False,
    check: bool = True,
    tag_prefix: str = "",
) -> Stamp:
    """The stamp for a build of the repository at `root`.

    The version is `choose_version`'s; a snapshot's is a dev version (`.dev0` is
    added to a tagged commit's). A given version must be PEP 440 (UsageError naming
    where it was given), unless `check=False`: the release checks it in preflight.
    The clock is $SOURCE_DATE_EPOCH, else the last commit's time.
    """
    chosen, source = choose_version(declared, env, override, snapshot=snapshot)
    from_git = chosen == "git"
    raw = git_outputs(
        root,
        ("log", "-1", "--format=%H %ct"),  # the commit and its time in one call
        _STATUS,  # raw: a porcelain line may start with a space
        _PREFIX,
        *((("describe", "--tags", "--long", *tag_match(tag_prefix)),) if from_git else ()),
        *((("rev-list", "--count", "HEAD"),) if from_git else ()),
        raw=True,
    )
    asked = [None if out is None else out.strip() for out in raw]
    head = (asked[0] or "").split()
    revision = head[0] if len(head) == 2 else None
    changed = _changed_paths(raw[1])
    dirty = bool(changed)  # anywhere in the repository: the version is the repository's
    described: tuple[str, str | None, int] | None = None
    if not from_git:
        version = _validate(chosen, source) if check else chosen
    else:
        if asked[4] is not None:  # HEAD's count (and its describe) known for certain
            described = (tag_prefix, asked[3], int(asked[4]))
        version = _described_version(
            revision, (asked[3], int(asked[4] or "0")), dirty, tag_prefix, snapshot, source
        )
    epoch = _epoch(env, int(head[1]) if len(head) == 2 else ZIP_EPOCH)
    return Stamp(
        version=version,
        revision=revision,
        dirty=dirty,
        epoch=max(epoch, ZIP_EPOCH),
        changed=None if changed is None else tuple(_below(changed, raw[2])),
        described=described,
    )


def _described_version(
    revision: str | None,
    described: tuple[str | None, int],
    dirty: bool,
    prefix: str,
    snapshot: bool,
    source: str,
) -> str:
    """`version: git`'s version: git describe's (output, commit count) of `revision`."""
    if revision is None:
        raise UsageError(
            "project.version is 'git' but there is no git commit here; "
            "commit, or set a literal version, --version or $VERSION"
        )
    version = version_from_describe(described[0], revision[:7], described[1], dirty, prefix)
    if snapshot and ".dev" not in version:
        version = _validate(f"{version}.dev0", source)
    return version


def _epoch(env: Mapping[str, str], committed: int) -> int:
    """The clock: $SOURCE_DATE_EPOCH (UsageError unless whole seconds), else `committed`."""
    raw_epoch = env.get("SOURCE_DATE_EPOCH")
    if not raw_epoch:
        return committed
    if not raw_epoch.isdigit():
        raise UsageError(
            f"$SOURCE_DATE_EPOCH='{raw_epoch}' is not a whole number of seconds; fix or unset it"
        )
    return int(raw_epoch)


_STATUS = ("status", "--porcelain", "-z", "--untracked-files=no")
_PREFIX = ("rev-parse", "--show-prefix")  # where `root` is inside the work tree


def _below(paths: list[str], prefix: str | None) -> list[str]:
    """`paths` (relative to the git work tree's top) that lie in the folder whose
    `git rev-parse --show-prefix` is `prefix`, made relative to it: the workspace may
    be a folder below the repository root."""
    prefix = (prefix or "").strip()
    if not prefix:
        return paths
    return [p[len(prefix) :] for p in paths if p.startswith(prefix)]


def _changed_paths(done: str | None) -> list[str] | None:
    """The paths `git status --porcelain -z` output lists (both sides of a rename)."""
    if done is None:
        return None
    paths: list[str] = []
    fields = done.split("\0")
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        paths.append(entry[3:])
        if entry[0] in "RC":  # a rename or copy: the source path follows
            paths.append(fields[i])
            i += 1
    return paths


def work_tree_changes(root: Path) -> list[str]:
    """The tracked paths with changes in the work tree, relative to `root` (which may be
    a folder below the repository's top); empty without git."""
    status, prefix = git_outputs(root, _STATUS, _PREFIX, raw=True)
    return _below(_changed_paths(status) or [], prefix)
