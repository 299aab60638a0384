"""Build identity read once at the edge: version, revision, dirty flag and the clock.

Everything downstream takes a `Stamp` instead of asking git or the clock again, so
one build sees one version and one timestamp (the basis of reproducibility).
"""

from __future__ import annotations

import contextlib
import json
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
    "Inputs",
    "Stamp",
    "choose_version",
    "input_stamps",
    "read_stamp",
    "tag_match",
    "tag_version",
    "version_from_describe",
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
    # (`read_stamp`): `input_stamps` reuses them instead of asking git again.
    changed: tuple[str, ...] | None = field(default=None, compare=False, repr=False)

    @property
    def created(self) -> str:
        """The clock as RFC 3339 UTC, as OCI annotations want it."""
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.epoch))

    @property
    def tag(self) -> str:
        """The version as a valid image tag (`+` is not allowed there)."""
        return self.version.replace("+", "-")


def _git(root: Path, *commands: tuple[str, ...], raw: bool = False) -> list[str | None]:
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
    raw = _git(
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
    if not from_git:
        version = _validate(chosen, source) if check else chosen
    elif revision is None:
        raise UsageError(
            "project.version is 'git' but there is no git commit here; "
            "commit, or set a literal version, --version or $VERSION"
        )
    else:
        describe, count = asked[3], int(asked[4] or "0")
        version = version_from_describe(describe, revision[:7], count, dirty, tag_prefix)
        if snapshot and ".dev" not in version:
            version = _validate(f"{version}.dev0", source)
    raw_epoch = env.get("SOURCE_DATE_EPOCH")
    if raw_epoch:
        if not raw_epoch.isdigit():
            raise UsageError(
                f"$SOURCE_DATE_EPOCH='{raw_epoch}' is not a whole number of seconds; "
                "fix or unset it"
            )
        epoch = int(raw_epoch)
    else:
        epoch = int(head[1]) if len(head) == 2 else ZIP_EPOCH
    return Stamp(
        version=version,
        revision=revision,
        dirty=dirty,
        epoch=max(epoch, ZIP_EPOCH),
        changed=None if changed is None else tuple(_below(changed, raw[2])),
    )


@dataclass(frozen=True)
class Inputs:
    """The folders (repository-relative, POSIX) whose last commit versions a group of
    actions, and the folders inside them that belong to others."""

    include: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    tag_prefix: str = ""  # the tags that version them (`project.tag_prefix`, filled in)

    def pathspec(self) -> list[str]:
        """git pathspecs: the folders, minus the excluded ones."""
        return [*(p or "." for p in self.include), *(f":(exclude){p}" for p in self.exclude)]

    def pathspec_key(self) -> str:
        """These inputs as one string (a memo's key)."""
        return json.dumps([self.include, self.exclude])

    def holds(self, path: str) -> bool:
        """Whether the repository-relative `path` is one of these inputs."""

        def inside(folder: str) -> bool:
            return not folder or path == folder or path.startswith(folder + "/")

        return any(inside(f) for f in self.include) and not any(inside(f) for f in self.exclude)


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


def input_stamps(
    root: Path,
    build: Stamp,
    groups: Mapping[str, Inputs],
    env: Mapping[str, str],
    *,
    versioned: bool = True,
    memo: Path | None = None,
) -> dict[str, Stamp]:
    """One stamp per group of inputs: each binary's from its own inputs.

    A group's revision is the last commit that changed its folders and its clock
    that commit's time (unless $SOURCE_DATE_EPOCH is set); it is dirty only when
    its own folders are. With `versioned` (`version: git`), its version is git
    describe's of that commit; otherwise it keeps `build`'s version. So a binary
    whose inputs did not change keeps its stamp, its keys and its cache hits
    across commits. A group git knows no commit for takes `build`.

    With `memo` (a file), each group's last commit is remembered for the current
    HEAD (history under one HEAD never changes), so a no-op build asks git only
    for the working tree's changes and one `describe`.
    """
    if not groups or build.revision is None:
        return {name: build for name in groups}
    if build.changed is not None:
        changed = list(build.changed)
    else:
        status, prefix = _git(root, _STATUS, _PREFIX, raw=True)
        changed = _below(_changed_paths(status) or [], prefix)
    names = sorted(groups)
    known = _last_commits(memo, build.revision)
    asked = [n for n in names if groups[n].pathspec_key() not in known]
    logs = _git(
        root, *(("log", "-1", "--format=%H %ct", "--", *groups[n].pathspec()) for n in asked)
    )
    for name, out in zip(asked, logs, strict=True):
        fields = (out or "").split()
        if len(fields) == 2 and fields[1].isdigit():
            known[groups[name].pathspec_key()] = (fields[0], int(fields[1]))
    if asked and memo is not None:
        _save_last_commits(memo, build.revision, known)
    last = {n: known[groups[n].pathspec_key()] for n in names if groups[n].pathspec_key() in known}
    wanted = sorted({(groups[n].tag_prefix, last[n][0]) for n in last})
    described = _describe(root, wanted) if versioned else dict.fromkeys(wanted, (None, 0))
    raw_epoch = env.get("SOURCE_DATE_EPOCH")
    stamps: dict[str, Stamp] = {}
    for name in names:
        if name not in last:
            stamps[name] = build
            continue
        commit, when = last[name]
        dirty = any(groups[name].holds(p) for p in changed)
        prefix = groups[name].tag_prefix
        describe, count = described[(prefix, commit)]
        version = (
            version_from_describe(describe, commit[:7], count, dirty, prefix)
            if versioned
            else build.version
        )
        epoch = int(raw_epoch) if raw_epoch and raw_epoch.isdigit() else when
        stamps[name] = Stamp(version, commit, dirty, max(epoch, ZIP_EPOCH))
    return stamps


def _last_commits(memo: Path | None, head: str) -> dict[str, tuple[str, int]]:
    """The groups' last commits remembered for `head` (none for another HEAD)."""
    if memo is None:
        return {}
    try:
        data = json.loads(memo.read_bytes())
        if data.get("head") != head:
            return {}
        return {
            str(k): (str(v[0]), int(v[1]))
            for k, v in data["last"].items()
            if isinstance(v, list) and len(v) == 2
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _save_last_commits(memo: Path, head: str, last: Mapping[str, tuple[str, int]]) -> None:
    from shipyard._fs import atomic_write

    data = {"head": head, "last": {k: list(v) for k, v in sorted(last.items())}}
    with contextlib.suppress(OSError):  # a memo that cannot be written costs a git run
        atomic_write(memo, json.dumps(data).encode(), durable=False)


def _describe(
    root: Path, wanted: list[tuple[str, str]]
) -> dict[tuple[str, str], tuple[str | None, int]]:
    """git describe's output (tags with the given prefix) and the commit count of each
    (prefix, commit); describe batched per prefix, commits no tag describes counted
    one by one."""
    found: dict[tuple[str, str], tuple[str | None, int]] = {}
    for prefix in sorted({p for p, _ in wanted}):
        commits = [c for p, c in wanted if p == prefix]
        pattern = ("describe", "--tags", "--long", *tag_match(prefix))
        batch = _git(root, (*pattern, *commits))[0]
        lines = batch.splitlines() if batch is not None else []
        if len(lines) == len(commits):
            found.update({(prefix, c): (ln, 0) for c, ln in zip(commits, lines, strict=True)})
            continue
        each = _git(
            root,
            *((*pattern, c) for c in commits),
            *(("rev-list", "--count", c) for c in commits),
        )
        count = len(commits)
        found.update(
            {(prefix, c): (each[i], int(each[count + i] or "0")) for i, c in enumerate(commits)}
        )
    return found
