"""Build identity read once at the edge: version, revision, dirty flag and the clock.

Everything downstream takes a `Stamp` instead of asking git or the clock again, so
one build sees one version and one timestamp (the basis of reproducibility).
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from shipyard.errors import UsageError

__all__ = ["ZIP_EPOCH", "Stamp", "choose_version", "read_stamp", "version_from_describe"]

# Zip cannot store times before 1980; a clock before that is clamped here.
ZIP_EPOCH = 315532800


@dataclass(frozen=True)
class Stamp:
    """The version, git revision, dirty flag and clock of one build."""

    version: str
    revision: str | None
    dirty: bool
    epoch: int

    @property
    def created(self) -> str:
        """The clock as RFC 3339 UTC, as OCI annotations want it."""
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.epoch))

    @property
    def tag(self) -> str:
        """The version as a valid image tag (`+` is not allowed there)."""
        return self.version.replace("+", "-")


def _git(root: Path, *commands: tuple[str, ...]) -> list[str | None]:
    """Each git command's output (None where it failed), the commands run side by side:
    every build asks, and git's start-up is most of what a no-op build waits for."""
    running: list[subprocess.Popen[str] | None] = []
    for args in commands:
        try:
            running.append(
                subprocess.Popen(
                    ["git", "-C", str(root), *args],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
            )
        except OSError:
            running.append(None)
    outputs: list[str | None] = []
    for process in running:
        if process is None:
            outputs.append(None)
            continue
        stdout, _ = process.communicate()
        outputs.append(stdout.strip() if process.returncode == 0 else None)
    return outputs


_DESCRIBE = re.compile(r"^v?(?P<tag>.+)-(?P<distance>\d+)-g(?P<sha>[0-9a-f]+)$")


def version_from_describe(describe: str | None, sha: str, count: int, dirty: bool) -> str:
    """PEP 440 version from `git describe --tags --long` output.

    At a tag: the tag. After it: the next patch release as a dev version with the
    revision as local label (1.4.0 -> 1.4.1.dev3+g1a2b3c4). No tag: 0.0.0.devN.
    """
    local = [f"g{sha}"] + (["dirty"] if dirty else [])
    tagged = _tagged(describe)
    if tagged is None:
        return f"0.0.0.dev{count}+{'.'.join(local)}"
    base, distance = tagged
    if distance == 0:
        return str(base) + ("+dirty" if dirty else "")
    release = list(base.release) + [0] * (3 - len(base.release))
    release[-1] += 1
    return f"{'.'.join(map(str, release))}.dev{distance}+{'.'.join(local)}"


def _tagged(describe: str | None) -> tuple[Version, int] | None:
    """The PEP 440 tag and the distance from it in `git describe` output, if both are there."""
    match = _DESCRIBE.match(describe or "")
    if not match:
        return None
    try:
        return Version(match["tag"]), int(match["distance"])
    except InvalidVersion:
        return None


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
) -> Stamp:
    """The stamp for a build of the repository at `root`.

    The version is `choose_version`'s; a snapshot's is a dev version (`.dev0` is
    added to a tagged commit's). A given version must be PEP 440 (UsageError naming
    where it was given), unless `check=False`: the release checks it in preflight.
    The clock is $SOURCE_DATE_EPOCH, else the last commit's time.
    """
    chosen, source = choose_version(declared, env, override, snapshot=snapshot)
    from_git = chosen == "git"
    asked = _git(
        root,
        ("log", "-1", "--format=%H %ct"),  # the commit and its time in one call
        ("status", "--porcelain", "--untracked-files=no"),
        *((("describe", "--tags", "--long", "--match", "*[0-9]*"),) if from_git else ()),
        *((("rev-list", "--count", "HEAD"),) if from_git else ()),
    )
    head = (asked[0] or "").split()
    revision = head[0] if len(head) == 2 else None
    dirty = bool(asked[1])
    if not from_git:
        version = _validate(chosen, source) if check else chosen
    elif revision is None:
        raise UsageError(
            "project.version is 'git' but there is no git commit here; "
            "commit, or set a literal version, --version or $VERSION"
        )
    else:
        describe, count = asked[2], int(asked[3] or "0")
        version = version_from_describe(describe, revision[:7], count, dirty)
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
    return Stamp(version=version, revision=revision, dirty=dirty, epoch=max(epoch, ZIP_EPOCH))
