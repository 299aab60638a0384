"""Is uv.lock up to date? uv says, where it can answer without the network.

`uv lock --check --offline` is run in the workspace root with the user's own environment
(less shipyard's secrets), as the user would type it: its verdict is the verdict, so
shipyard never calls a lock stale that uv accepts nor fresh one it rejects. Where uv
cannot answer offline (a git dependency to fetch, a member's build backend not in its
cache, no interpreter the lock allows), the in-process check (`_check`) answers instead,
and says so. A stale lock fails only the binaries whose projects uv (its verbose log
names the member whose requirements no longer match) or the in-process check names.

uv's answer is remembered in dist/ by a digest of everything it read (uv.lock, every
pyproject.toml, the files at the top of members whose metadata is dynamic, uv itself),
so a no-op build asks once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard._fs import atomic_write
from shipyard.workspace._check import _manifest, _member, check_in_process
from shipyard.workspace._text import Where, WorkspaceError

if TYPE_CHECKING:
    from shipyard.workspace.projects import Workspace

__all__ = ["check_lock"]

_RELOCK = "run `uv lock`"
_STALE = "needs to be updated"
# uv -v: "Resolving despite existing lockfile due to mismatched requirements for: `a==1`"
_NAMED = re.compile(r"due to [^`\n]*for: `([A-Za-z0-9._-]+)(?:==[^`]*)?`")
_FORMAT = "shipyard-lock-check-1"


@dataclass(frozen=True)
class UvAnswer:
    """What `uv lock --check --offline` said: fresh, stale or unknown (it could not
    tell), the members its log names, and its own last words."""

    verdict: str
    members: tuple[str, ...] = ()
    said: str = ""


def ask_uv(root: Path, env: Mapping[str, str], uv: str | None) -> UvAnswer:
    """Run `uv lock --check --offline -v` in `root`."""
    if uv is None:
        return UvAnswer("unknown", said="uv is not installed")
    try:
        done = subprocess.run(
            [uv, "lock", "--check", "--offline", "-v"],
            cwd=root, env=dict(env), capture_output=True, text=True, timeout=300,
            check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as error:
        return UvAnswer("unknown", said=str(error))
    if done.returncode == 0:
        return UvAnswer("fresh")
    errors = [line for line in done.stderr.splitlines() if not line.startswith(("DEBUG", "TRACE"))]
    said = "\n".join(line for line in errors if line.strip())[-800:]
    if _STALE in done.stderr:
        from packaging.utils import canonicalize_name

        named = sorted({str(canonicalize_name(n)) for n in _NAMED.findall(done.stderr)})
        return UvAnswer("stale", tuple(named), said)
    return UvAnswer("unknown", said=said)


def _digest(workspace: Workspace, uv: str | None) -> str:
    """Everything `uv lock --check` reads, hashed; stat facts for dynamic members' files."""
    digest = hashlib.sha256(f"{_FORMAT}\0{uv}\0".encode())
    lock = workspace.lock
    assert lock is not None
    digest.update(lock.text.encode())  # the bytes parsed, not read again
    for folder, file in sorted(workspace._files.items()):
        digest.update(f"\0{folder}\0".encode() + file.text.encode())
    for project in sorted(workspace.projects.values(), key=lambda p: p.root):
        if not project.dynamic:
            continue
        with contextlib.suppress(OSError):
            for entry in sorted(os.scandir(project.root), key=lambda e: e.name):
                if entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    digest.update(f"\0{entry.path}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return digest.hexdigest()


def _remembered(memo: Path | None, key: str) -> UvAnswer | None:
    if memo is None:
        return None
    try:
        data = json.loads(memo.read_text(encoding="utf-8"))
        if data.get("key") != key:
            return None
        return UvAnswer(str(data["verdict"]), tuple(data["members"]), str(data["said"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _remember(memo: Path | None, key: str, answer: UvAnswer) -> None:
    if memo is None or not memo.parent.is_dir():
        return
    record = {"key": key, "verdict": answer.verdict, "members": list(answer.members),
              "said": answer.said}  # fmt: skip
    with contextlib.suppress(OSError):  # not remembered: uv is asked again, nothing more
        atomic_write(memo, json.dumps(record).encode(), durable=False)


def check_lock(
    workspace: Workspace,
    keys: Iterable[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    memo: Path | None = None,
    uv: str | None = None,
    ask: bool = True,
) -> str:
    """Raise a WorkspaceError (exit 2) if uv.lock is out of date for any project in
    `keys` (the projects the selected binaries install; None: every member), or for the
    workspace as a whole. Returns how freshness was decided, for people ("up to date",
    "up to date as read without uv: ..."). `uv` is the uv executable (default: found);
    `ask=False` skips uv (the in-process check alone)."""
    lock = workspace.lock
    if lock is None:
        return ""
    wanted = None if keys is None else set(keys)
    if ask and uv is None:
        from shipyard.process import uv_binary

        uv = uv_binary()
    answer = UvAnswer("unknown", said="not asked")
    if ask:
        from shipyard.process import without_secrets

        key = _digest(workspace, uv)
        remembered = _remembered(memo, key)
        if remembered is None:
            answer = ask_uv(workspace.root, without_secrets(os.environ if env is None else env), uv)
            _remember(memo, key, answer)
        else:
            answer = remembered
    if answer.verdict == "fresh":
        return "uv.lock up to date"
    if answer.verdict == "stale":
        return _stale(workspace, wanted, answer)
    notes = check_in_process(workspace, wanted)
    lines = [line.strip() for line in answer.said.splitlines() if line.strip()]
    first = next((line for line in lines if line.lower().startswith("error:")), None)
    why = (first or (lines[0] if lines else "uv could not answer")).removeprefix("error: ")
    if notes:
        return (
            f"uv.lock not checked for {', '.join(notes)} (uv lock --check could not tell: "
            f"{why}); up to date for the rest as read by shipyard"
        )
    return f"uv.lock up to date as read by shipyard (uv lock --check could not tell: {why})"


def _stale(workspace: Workspace, wanted: set[str] | None, answer: UvAnswer) -> str:
    """uv says stale: fail for the selected projects it (or the in-process check) names,
    or for everything when no member can be named."""
    lock = workspace.lock
    assert lock is not None
    members = set(workspace.members)
    named = set(answer.members) & members
    errors: dict[str, WorkspaceError] = {}
    for key in sorted(members):
        found = _member(workspace, key)
        if isinstance(found, WorkspaceError):
            errors[key] = found
            named.add(key)
    if not named:
        raise _manifest(workspace) or WorkspaceError(
            Where(lock.path, 1, 1, workspace.root),
            "uv.lock is out of date (uv lock --check: "
            + (answer.said.splitlines() or ["it needs to be updated"])[0]
            + ")",
            _RELOCK,
        )
    hit = sorted(named if wanted is None else named & wanted)
    if hit:
        key = hit[0]
        if key in errors:
            raise errors[key]
        project = workspace.projects.get(key) or workspace.duplicates[key][0]
        file = workspace._files[project.root]
        raise WorkspaceError(
            file.where(("project",), root=workspace.root),
            f"uv.lock is out of date for `{project.name}` (uv lock --check found its "
            "requirements changed)",
            _RELOCK,
        )
    return (
        f"uv.lock is out of date for {', '.join(sorted(named))}, which the selected binaries "
        "do not install (run `uv lock`)"
    )
