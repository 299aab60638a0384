"""Affected builds: which binaries' inputs changed since a commit, and why.

A binary's inputs are its source folder (less the other binaries' sources and
projects nested in it), the in-repo libraries its project depends on (through the
binary's extras and the extras asked of them too), its manifest entry, and its slice
of uv.lock (or its own requirements lock). Changed files come from git: `SINCE`
against the working tree, committed or not, plus untracked files git does not ignore.
Each changed file is mapped to the deepest source or project folder holding it by
dictionary lookups up its parents, so the cost follows the number of changed files,
not the size of the repository.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from shipyard import git
from shipyard.errors import Problem, ShipyardError, UsageError
from shipyard.files.sources import _IGNORED_DIRS, _OUTPUT_DIRS
from shipyard.manifest import Binary, Manifest, did_you_mean
from shipyard.manifest import Project as Settings
from shipyard.workspace import Lock, LockedPackage, Workspace, WorkspaceError

__all__ = ["KINDS", "Affected", "Reason", "affected", "changed_files"]

# The kinds of reason, in the order a binary's reasons are listed.
KINDS = ("source", "library", "manifest", "lock")
_SHOWN = 3  # packages named in a lock reason before "and N more"


@dataclass(frozen=True)
class Reason:
    """Why a binary is affected: one changed file, and how it reaches the binary."""

    kind: str  # one of KINDS
    path: str  # the changed file, relative to the repository root, with '/'
    via: tuple[str, ...] = ()  # "library": project names from the binary's to the changed one
    detail: str = ""  # human text: what in the manifest entry or the lock changed

    def __str__(self) -> str:
        notes = [f"through {' -> '.join(self.via)}"] if self.via else []
        notes += [self.detail] if self.detail else []
        return f"{self.path} changed" + (f" ({'; '.join(notes)})" if notes else "")

    def to_json(self) -> dict[str, object]:
        """A JSON-ready view, with the one-line text as `text`."""
        return {
            "kind": self.kind,
            "path": self.path,
            "via": list(self.via),
            "detail": self.detail,
            "text": str(self),
        }


@dataclass(frozen=True)
class Affected:
    """A binary whose inputs changed, with every reason (kind order, then path)."""

    binary: str
    reasons: tuple[Reason, ...]

    def to_json(self) -> dict[str, object]:
        """A JSON-ready view, as `shipyard affected --json` lists it."""
        return {"binary": self.binary, "reasons": [r.to_json() for r in self.reasons]}


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    done = git.run(root, *args)
    if done is None:
        raise UsageError("--since needs git, which could not run; install git or drop --since")
    return done


def _commit(root: Path, since: str) -> str:
    """The commit `since` names, checked; UsageError naming --since and the fix."""
    done = _git(root, "rev-parse", "--is-inside-work-tree")
    if done.returncode != 0 or done.stdout.strip() != b"true":
        raise UsageError(
            f"--since={since}: {root} is not a git work tree; "
            "run in a git checkout, or drop --since"
        )
    if since.startswith("-") or not since.strip():
        raise UsageError(f"--since={since!r}: not a commit; give a branch, tag or commit")
    done = _git(root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{since}^{{commit}}")
    if done.returncode != 0:
        raise UsageError(
            f"--since={since}: not a commit in this repository; give a branch, tag or commit "
            "(fetch it first, e.g. `git fetch origin main`; in CI, check out with full "
            "history, e.g. fetch-depth: 0)"
        )
    return done.stdout.decode().strip()


def _names(output: bytes) -> list[str]:
    return [os.fsdecode(n) for n in output.split(b"\0") if n]


def _changes(root: Path, since: str) -> tuple[str, tuple[str, ...]]:
    sha = _commit(root, since)
    files: set[str] = set()
    for args in (
        ("diff", "--name-only", "--no-renames", "--no-ext-diff", "--relative", "-z", sha, "--"),
        ("ls-files", "-z", "--others", "--exclude-standard"),
    ):
        done = _git(root, *args)
        if done.returncode != 0:
            message = done.stderr.decode(errors="replace").strip()
            raise UsageError(f"--since={since}: git {args[0]} failed: {message}")
        files.update(_names(done.stdout))
    return sha, tuple(sorted(files))


def changed_files(root: Path, since: str) -> tuple[str, ...]:
    """Files changed between commit `since` and the working tree, relative to `root`, sorted.

    Committed and uncommitted changes both count, and untracked files git does
    not ignore; a move counts as its deletion and its addition. UsageError (exit 2)
    when `since` is not a commit or `root` is not in a git work tree.
    """
    return _changes(root, since)[1]


def _show(root: Path, sha: str, rel: str) -> bytes | None:
    """The file `rel` (relative to `root`) as commit `sha` has it; None when it had none."""
    done = _git(root, "show", f"{sha}:./{rel}")
    return done.stdout if done.returncode == 0 else None


def _rel(path: Path, root: Path) -> str | None:
    """`path` relative to `root` with '/', '.' for the root itself; None when outside."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        try:
            return path.resolve().relative_to(root).as_posix()
        except ValueError:
            return None


def _never_input(path: str) -> bool:
    """VCS data, environments and caches: not an input of anything (see shipyard.files.sources)."""
    return not _IGNORED_DIRS.isdisjoint(path.split("/"))


def _output(path: str, folder: str) -> bool:
    """A build's own output at the top of `folder` (its dist/, build/): not an input."""
    inner = path if folder == "." else path[len(folder) + 1 :]
    return inner.split("/", 1)[0] in _OUTPUT_DIRS and "/" in inner


def _inside(path: str, folder: str) -> bool:
    return folder == "." or path.startswith(folder + "/")


class _Owners:
    """Binary sources and project roots by folder: a changed file belongs to the deepest."""

    def __init__(self, manifest: Manifest, workspace: Workspace) -> None:
        root = manifest.root
        self.sources: dict[str, list[str]] = {}
        for binary in manifest.binaries.values():
            rel = _rel(binary.source, root)
            if rel is not None:
                self.sources.setdefault(rel, []).append(binary.name)
        self.projects: dict[str, str] = {}
        for key, project in workspace.projects.items():
            rel = _rel(project.root, root)
            if rel is not None:
                self.projects[rel] = key

    def owner(self, path: str) -> str | None:
        """The deepest source or project folder holding `path`, or None."""
        folder = path
        while folder:
            folder = posixpath.dirname(folder)
            key = folder or "."
            if key in self.sources or key in self.projects:
                return key
        return None


def _library_users(
    workspace: Workspace,
    library: str,
    by_project: Mapping[str, list[str]],
    extras: Mapping[str, frozenset[str]],
) -> dict[str, tuple[str, ...]]:
    """The binaries (of `by_project`) that install `library`, each with a shortest chain of
    project names down to it: through their project alone or with one of their `extras`."""
    found: dict[str, tuple[str, ...]] = {}
    for (key, extra), chain in sorted(workspace.requirers(library).items()):
        for name in by_project.get(key, ()):
            if extra and extra not in extras[name]:
                continue
            if name not in found or len(chain) < len(found[name]):
                found[name] = chain
    return found


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Path):
        return str(value)
    return value


def _entry(binary: Binary, settings: Settings) -> dict[str, object]:
    """A binary's effective manifest entry as flat `key: value`s, for naming what changed."""
    out: dict[str, object] = {}
    for field in dataclasses.fields(binary):
        value = getattr(binary, field.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for inner in dataclasses.fields(value):
                out[f"{field.name}.{inner.name}"] = _plain(getattr(value, inner.name))
        elif field.name != "name":
            out[field.name] = _plain(value)
    for field in dataclasses.fields(settings):
        out[f"project.{field.name}"] = _plain(getattr(settings, field.name))
    return out


def _entries_then(
    manifest: Manifest, data: bytes, env: Mapping[str, str]
) -> dict[str, dict[str, object]] | None:
    """Each binary's effective entry in an older binaries.yaml, or None if it cannot be read.

    Validated as the loader does it (defaults merged, ${VAR} expanded with `env`,
    paths resolved) but without the checks against today's files: an old entry
    may name a folder deleted since, and must still compare.
    """
    from pydantic import ValidationError

    from shipyard.manifest._expand import expand
    from shipyard.manifest._model import ManifestDoc
    from shipyard.manifest._validate import _binary
    from shipyard.manifest._yaml import load_yaml

    try:
        raw, positions = load_yaml(manifest.path, data)
        if not isinstance(raw, dict):
            return None
        doc = ManifestDoc.model_validate(expand(raw, env, positions))
        given = doc.project.python
        pythons = (given,) if isinstance(given, str) else tuple(given)
        settings = Settings(doc.project.name, doc.project.version, pythons[0], pythons)
        problems: list[Problem] = []  # today's file checks: not this comparison's business
        return {
            name: _entry(
                _binary(
                    name,
                    entry,
                    defaults=doc,
                    root=manifest.root,
                    base=manifest.path.parent,
                    positions=positions,
                    problems=problems,
                ),
                settings,
            )
            for name, entry in doc.binaries.items()
        }
    except (ShipyardError, ValidationError, OSError, ValueError, KeyError):
        return None


def _manifest_reasons(
    manifest: Manifest,
    chosen: list[str],
    old: bytes | None,
    rel: str,
    since: str,
    env: Mapping[str, str],
) -> dict[str, Reason]:
    then = None if old is None else _entries_then(manifest, old, env)
    if old is not None and then is None:
        detail = f"{rel} at {since} could not be read; counted as changed"
        return {name: Reason("manifest", rel, detail=detail) for name in chosen}
    out: dict[str, Reason] = {}
    for name in chosen:
        before = (then or {}).get(name)
        if before is None:
            out[name] = Reason("manifest", rel, detail="new binary")
            continue
        now = _entry(manifest.binaries[name], manifest.project)
        keys = sorted(k for k in now.keys() | before.keys() if now.get(k) != before.get(k))
        if keys:
            out[name] = Reason("manifest", rel, detail="entry changed: " + ", ".join(keys))
    return out


def _slice(lock: Lock, key: str, extras: frozenset[str]) -> tuple[LockedPackage, ...] | None:
    return lock.slice(key, sorted(extras)) if key in lock.members else None


def _lock_detail(
    old: tuple[LockedPackage, ...] | None, new: tuple[LockedPackage, ...] | None
) -> str:
    before = {p.name: p for p in old or ()}
    after = {p.name: p for p in new or ()}
    items: list[str] = []
    for name in sorted(before.keys() | after.keys()):
        was, now = before.get(name), after.get(name)
        if was is None and now is not None:
            items.append(f"{name} {now.version} added")
        elif now is None and was is not None:
            items.append(f"{name} {was.version} removed")
        elif was is not None and now is not None and was != now:
            if was.version != now.version:
                items.append(f"{name} {was.version} -> {now.version}")
            else:
                what = "source" if was.source != now.source else "hashes"
                items.append(f"{name} {now.version} ({what} changed)")
    if not items:
        return "locked set changed"
    more = len(items) - _SHOWN
    return "locked: " + ", ".join(items[:_SHOWN]) + (f" and {more} more" if more > 0 else "")


def _lock_reasons(
    workspace: Workspace,
    projects: Mapping[str, str],
    extras: Mapping[str, frozenset[str]],
    old: bytes | None,
    lock_path: Path,
    rel: str,
    since: str,
) -> dict[str, Reason]:
    """Binaries (by name, with a project key in `projects`) whose locked slice (with
    their `extras`) changed."""
    new = workspace.lock
    if old is None and new is None:
        return {}
    if old is None or new is None:
        detail = f"{rel} added" if old is None else f"{rel} removed"
        return {name: Reason("lock", rel, detail=detail) for name in projects}
    try:
        then = Lock.parse(old.decode(), lock_path)
    except (WorkspaceError, UnicodeDecodeError):
        detail = f"{rel} at {since} could not be read; counted as changed"
        return {name: Reason("lock", rel, detail=detail) for name in projects}
    out: dict[str, Reason] = {}
    for name, key in projects.items():
        now = _slice(new, key, extras[name])
        try:
            was = _slice(then, key, extras[name])
        except WorkspaceError:  # an old lock out of step with itself: count it as changed
            out[name] = Reason("lock", rel, detail=f"{rel} at {since} could not be read")
            continue
        if was is None and now is None:
            continue
        chosen = sorted(extras[name])
        if (
            was is None
            or now is None
            or then.slice_digest(key, chosen) != new.slice_digest(key, chosen)
        ):
            out[name] = Reason("lock", rel, detail=_lock_detail(was, now))
    return out


def _chosen(manifest: Manifest, binaries: Iterable[str] | None) -> list[str]:
    if binaries is None:
        return list(manifest.binaries)
    wanted = set(binaries)
    for name in sorted(wanted - manifest.binaries.keys()):
        hint = did_you_mean(name, manifest.binaries) or "see `shipyard list`"
        raise UsageError(f"--binary={name}: unknown binary; {hint}")
    return [name for name in manifest.binaries if name in wanted]


def affected(
    manifest: Manifest,
    workspace: Workspace,
    since: str,
    binaries: Iterable[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> tuple[Affected, ...]:
    """The binaries (all, or those named) whose inputs changed since commit `since`.

    In manifest order, each with its reasons. `env` expands `${VAR}` in both
    versions of binaries.yaml when that file changed (default: os.environ).
    """
    root = manifest.root
    env = os.environ if env is None else env
    chosen = _chosen(manifest, binaries)
    sha, changed = _changes(root, since)
    changed = tuple(p for p in changed if not _never_input(p))
    reasons: dict[str, set[Reason]] = {name: set() for name in chosen}
    manifest_rel = _rel(manifest.path, root) or manifest.path.name
    lock_path = workspace.lock.path if workspace.lock is not None else workspace.root / "uv.lock"
    lock_rel = _rel(lock_path, root) or "uv.lock"
    requirements: dict[str, str] = {}
    for name in chosen:
        lock_file = manifest.binaries[name].requirements
        rel = _rel(lock_file, root) if lock_file is not None else None
        if rel is not None:
            requirements[name] = rel
    # The manifest and uv.lock count by what changed in them, not as source files.
    special = {manifest_rel, lock_rel}

    projects: dict[str, str] = {}  # binary -> its project's key
    by_project: dict[str, list[str]] = {}
    extras = {
        name: frozenset(canonicalize_name(e) for e in manifest.binaries[name].extras)
        for name in chosen
    }
    for name in chosen:
        project = workspace.project_at(manifest.binaries[name].source)
        if project is not None:
            projects[name] = project.key
            by_project.setdefault(project.key, []).append(name)

    owners = _Owners(manifest, workspace)
    by_folder: dict[str, list[str]] = {}
    for path in changed:
        folder = None if path in special else owners.owner(path)
        if folder is not None and not _output(path, folder):
            by_folder.setdefault(folder, []).append(path)
    for folder, paths in by_folder.items():
        for name in owners.sources.get(folder, ()):
            if name in reasons:  # its own requirements lock is a "lock" reason below
                own = requirements.get(name)
                reasons[name].update(Reason("source", p) for p in paths if p != own)
        library = owners.projects.get(folder)
        if library is not None:
            for name, via in _library_users(workspace, library, by_project, extras).items():
                reasons[name].update(Reason("library", p, via) for p in paths)

    for name in chosen:
        image = manifest.binaries[name].image
        if image.dockerfile and "image" in manifest.binaries[name].outputs:
            context = _rel((root / image.dockerfile).resolve().parent, root)
            if context is not None:
                reasons[name].update(
                    Reason("source", p, detail="in the Dockerfile's build context")
                    for p in changed
                    if _inside(p, context) and not _output(p, context)
                )

    changed_set = set(changed)
    for name, rel in requirements.items():
        if rel in changed_set:
            reasons[name].add(Reason("lock", rel, detail="requirements lock changed"))
    if manifest_rel in changed_set:
        old = _show(root, sha, manifest_rel)
        for name, reason in _manifest_reasons(
            manifest, chosen, old, manifest_rel, since, env
        ).items():
            reasons[name].add(reason)
    if lock_rel in changed_set:
        old = _show(root, sha, lock_rel)
        for name, reason in _lock_reasons(
            workspace, projects, extras, old, lock_path, lock_rel, since
        ).items():
            reasons[name].add(reason)

    def order(reason: Reason) -> tuple[int, str, tuple[str, ...], str]:
        return KINDS.index(reason.kind), reason.path, reason.via, reason.detail

    return tuple(
        Affected(name, tuple(sorted(reasons[name], key=order))) for name in chosen if reasons[name]
    )
