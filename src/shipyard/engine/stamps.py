"""Per-action stamps: each binary's revision, clock and (with `version: git`) version
from the last commit that changed its own inputs, so a binary whose inputs did not
change keeps its stamp, its keys and its cache hits across commits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from shipyard._fs import atomic_write
from shipyard.dist import dist_dir, stamps_file
from shipyard.engine.inputs import Inputs, version_inputs
from shipyard.manifest import Manifest
from shipyard.stamp import (
    ZIP_EPOCH,
    Stamp,
    choose_version,
    git_outputs,
    tag_match,
    version_from_describe,
    work_tree_changes,
)

if TYPE_CHECKING:
    from shipyard.engine.plan import Plan
    from shipyard.workspace import Workspace

__all__ = ["action_stamps", "input_stamps", "lockstep", "newest"]


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
    changed = list(build.changed) if build.changed is not None else work_tree_changes(root)
    last = _last_commit_of(root, groups, build.revision, memo)
    wanted = sorted({(groups[n].tag_prefix, last[n][0]) for n in last})
    described = _describe(root, wanted) if versioned else dict.fromkeys(wanted, (None, 0))
    raw_epoch = env.get("SOURCE_DATE_EPOCH")
    stamps: dict[str, Stamp] = {}
    for name in sorted(groups):
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


def _last_commit_of(
    root: Path, groups: Mapping[str, Inputs], head: str, memo: Path | None
) -> dict[str, tuple[str, int]]:
    """Each group's last commit and its time (none for a group git knows no commit
    for): remembered in `memo` for `head`, else asked of git, all at once."""
    names = sorted(groups)
    known = _last_commits(memo, head)
    asked = [n for n in names if groups[n].pathspec_key() not in known]
    logs = git_outputs(
        root, *(("log", "-1", "--format=%H %ct", "--", *groups[n].pathspec()) for n in asked)
    )
    for name, out in zip(asked, logs, strict=True):
        fields = (out or "").split()
        if len(fields) == 2 and fields[1].isdigit():
            known[groups[name].pathspec_key()] = (fields[0], int(fields[1]))
    if asked and memo is not None:
        _save_last_commits(memo, head, known)
    return {n: known[groups[n].pathspec_key()] for n in names if groups[n].pathspec_key() in known}


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
        batch = git_outputs(root, (*pattern, *commits))[0]
        lines = batch.splitlines() if batch is not None else []
        if len(lines) == len(commits):
            found.update({(prefix, c): (ln, 0) for c, ln in zip(commits, lines, strict=True)})
            continue
        each = git_outputs(
            root,
            *((*pattern, c) for c in commits),
            *(("rev-list", "--count", c) for c in commits),
        )
        count = len(commits)
        found.update(
            {(prefix, c): (each[i], int(each[count + i] or "0")) for i, c in enumerate(commits)}
        )
    return found


def lockstep(manifest: Manifest, workspace: Workspace | None) -> bool:
    """Whether every binary and library takes one version: `project.versioning`, else
    what the repository's pins imply (a project requiring another of the repository with
    `==` installs only beside that exact version)."""
    if manifest.project.versioning is not None:
        return manifest.project.versioning == "lockstep"
    if workspace is None:
        return False
    for project in workspace.projects.values():
        for dependency in project.dependencies:
            requirement = dependency.requirement
            name = canonicalize_name(requirement.name)
            exact = any(s.operator in ("==", "===") for s in requirement.specifier)
            if exact and name != project.key and name in workspace.projects:
                return True
    return False


def newest(stamps: Iterable[Stamp]) -> Stamp:
    """The stamp of the newest version (PEP 440 order; an unreadable one sorts first)."""

    def order(stamp: Stamp) -> tuple[int, Version | None]:
        try:
            return (1, Version(stamp.version))
        except InvalidVersion:
            return (0, None)

    return max(stamps, key=order)


def action_stamps(
    plan: Plan, stamp: Stamp, override: str | None, env: Mapping[str, str]
) -> dict[str, Stamp]:
    """Per-action stamps: each binary's revision and clock from the last commit that
    changed its own inputs, and with `version: git` its version too (one for all when
    the projects are in lockstep). A version given (--version, $VERSION or a literal
    project.version) stays one version for all. By action id."""

    manifest = plan.manifest
    versioned = choose_version(manifest.project.version, env, override)[0] == "git"
    actions = {a.id: a for a in plan.actions}
    by_action = {
        name: dataclasses.replace(
            i, tag_prefix=manifest.project.tag_prefix_for(actions[name].project)
        )
        for name, i in version_inputs(plan).items()
    }
    groups = {repr(i): i for i in by_action.values()}
    memo = stamps_file(dist_dir(manifest.root))
    found = input_stamps(manifest.root, stamp, groups, env, versioned=versioned, memo=memo)
    if versioned and found and lockstep(manifest, plan.workspace):
        found = dict.fromkeys(found, newest(found.values()))
    return {action: found[repr(i)] for action, i in by_action.items()}
