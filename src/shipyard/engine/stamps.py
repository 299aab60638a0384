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

    With `memo` (a file), each group's last commit and each commit's count are
    remembered for the current HEAD (history under one HEAD never changes), so a no-op
    build asks git only for the working tree's changes and at most one `describe`.
    """
    if not groups or build.revision is None:
        return {name: build for name in groups}
    changed = list(build.changed) if build.changed is not None else work_tree_changes(root)
    remembered = _Memo.load(memo, build.revision)
    last = _last_commit_of(root, groups, remembered)
    wanted = sorted({(groups[n].tag_prefix, last[n][0]) for n in last})
    described = (
        _describe(root, wanted, build, remembered.counts)
        if versioned
        else dict.fromkeys(wanted, (None, 0))
    )
    remembered.save()
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


@dataclasses.dataclass
class _Memo:
    """What one HEAD's history said: each group's last commit and its time (by the
    group's pathspec key) and commits' counts, kept in a file (none: nothing kept)."""

    path: Path | None
    head: str
    last: dict[str, tuple[str, int]]
    counts: dict[str, int]
    _saved: tuple[int, int] = dataclasses.field(default=(0, 0), init=False)

    @classmethod
    def load(cls, path: Path | None, head: str) -> _Memo:
        """The memo at `path` for `head` (empty for another HEAD or an unreadable file)."""
        memo = cls(path, head, {}, {})
        if path is None:
            return memo
        try:
            data = json.loads(path.read_bytes())
            if data.get("head") != head:
                return memo
            memo.last = {
                str(k): (str(v[0]), int(v[1]))
                for k, v in data["last"].items()
                if isinstance(v, list) and len(v) == 2
            }
            memo.counts = {str(k): int(v) for k, v in data.get("counts", {}).items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            memo.last, memo.counts = {}, {}
        memo._saved = (len(memo.last), len(memo.counts))
        return memo

    def save(self) -> None:
        """Write the memo when it learnt something since it was read."""
        if self.path is None or self._saved == (len(self.last), len(self.counts)):
            return
        data = {
            "head": self.head,
            "last": {k: list(v) for k, v in sorted(self.last.items())},
            "counts": dict(sorted(self.counts.items())),
        }
        with contextlib.suppress(OSError):  # a memo that cannot be written costs a git run
            atomic_write(self.path, json.dumps(data).encode(), durable=False)
        self._saved = (len(self.last), len(self.counts))


def _last_commit_of(
    root: Path, groups: Mapping[str, Inputs], memo: _Memo
) -> dict[str, tuple[str, int]]:
    """Each group's last commit and its time (none for a group git knows no commit
    for): remembered in `memo`, else asked of git, all at once."""
    names = sorted(groups)
    known = memo.last
    asked = [n for n in names if groups[n].pathspec_key() not in known]
    logs = git_outputs(
        root, *(("log", "-1", "--format=%H %ct", "--", *groups[n].pathspec()) for n in asked)
    )
    for name, out in zip(asked, logs, strict=True):
        fields = (out or "").split()
        if len(fields) == 2 and fields[1].isdigit():
            known[groups[name].pathspec_key()] = (fields[0], int(fields[1]))
    return {n: known[groups[n].pathspec_key()] for n in names if groups[n].pathspec_key() in known}


def _describe(
    root: Path, wanted: list[tuple[str, str]], build: Stamp, counts: dict[str, int]
) -> dict[tuple[str, str], tuple[str | None, int]]:
    """git describe's output (tags with the given prefix) and the commit count of each
    (prefix, commit); describe batched per prefix, commits no tag describes counted
    one by one (`counts` remembers the counts, by commit).

    The commits are `build.revision` or before it: when no tag with a prefix describes
    the revision (`build.described`), none describes them either, and git is asked
    only for the counts not known yet."""
    found: dict[tuple[str, str], tuple[str | None, int]] = {}
    if build.described is not None and build.revision is not None:
        counts.setdefault(build.revision, build.described[2])
    for prefix in sorted({p for p, _ in wanted}):
        commits = [c for p, c in wanted if p == prefix]
        pattern = ("describe", "--tags", "--long", *tag_match(prefix))
        untagged = build.described is not None and build.described[:2] == (prefix, None)
        if not untagged:
            batch = git_outputs(root, (*pattern, *commits))[0]
            lines = batch.splitlines() if batch is not None else []
            if len(lines) == len(commits):
                found.update({(prefix, c): (ln, 0) for c, ln in zip(commits, lines, strict=True)})
                continue
        each = [] if untagged else commits
        unknown = [c for c in commits if c not in counts]
        asked = git_outputs(
            root,
            *((*pattern, c) for c in each),
            *(("rev-list", "--count", c) for c in unknown),
        )
        for commit, out in zip(unknown, asked[len(each) :], strict=True):
            if out is not None and out.isdigit():
                counts[commit] = int(out)
        described = dict(zip(each, asked, strict=False))
        found.update({(prefix, c): (described.get(c), counts.get(c, 0)) for c in commits})
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
