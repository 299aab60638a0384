"""Hostile source trees: links out of the repository, link loops, pipes and devices.

The source hash (the first thing a wheel action reads) must refuse each with an
error naming the path, never follow a link out, never block on a pipe, and the
CLI must turn it into exit 2 with one message. Each hazard is tried in a git
checkout and in a plain folder (where the file list comes from a walk).
"""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from shipyard.errors import UsageError
from shipyard.files.sources import source_files, tree_hash
from tests.reliability import record

SECRET = b"outside-secret-5f1c0e\n"
ROOT = os.geteuid() == 0
TIMEOUT = 20.0


@dataclass(frozen=True)
class Tree:
    """A repository with a source folder `app`, and a sentinel folder beside the repository."""

    repo: Path
    source: Path
    outside: Path


def make_tree(folder: Path, *, git: bool) -> Tree:
    repo, outside = folder / "repo", folder / "outside"
    source = repo / "app"
    (source / "pkg").mkdir(parents=True)
    (source / "pyproject.toml").write_text('[project]\nname = "app"\nversion = "1"\n')
    (source / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (repo / "shared").mkdir()
    (repo / "shared" / "LICENSE").write_text("shared licence\n")
    outside.mkdir()
    (outside / "secret").write_bytes(SECRET)
    (outside / "folder").mkdir()
    (outside / "folder" / "inner").write_bytes(SECRET)
    if git:
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return Tree(repo, source, outside)


def _rel(path: Path, start: Path) -> str:
    return os.path.relpath(path, start)


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every entry under `folder`: mode and content (link text for links)."""
    found: dict[str, tuple[int, bytes]] = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            data = os.readlink(path).encode()
        elif stat.S_ISREG(info.st_mode):
            data = path.read_bytes()
        else:
            data = b""
        found[str(path.relative_to(folder))] = (info.st_mode, data)
    return found


# Each hazard plants something in the tree and returns the path the error must name.
Hazard = Callable[[Tree], Path]


def _link(path: Path, target: str | Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def _device(path: Path, kind: int, major: int, minor: int) -> Path:
    os.mknod(path, kind | 0o600, os.makedev(major, minor))
    return path


def _socket(path: Path) -> Path:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.close()  # the socket file stays
    return path


def _chain(t: Tree) -> Path:
    _link(t.source / "pkg" / "b", "/etc/hostname")
    return _link(t.source / "pkg" / "a", "b")


def _loop(t: Tree) -> Path:
    _link(t.source / "pkg" / "y", "x")
    return _link(t.source / "pkg" / "x", "y")


def _shared_folder_with_a_leak(t: Tree) -> Path:
    _link(t.repo / "shared" / "leak", t.outside / "secret")
    _link(t.source / "shared", "../shared")
    return t.source / "shared" / "leak"


def _link_to_a_pipe_in_the_repository(t: Tree) -> Path:
    _fifo(t.repo / "shared" / "pipe")
    return _link(t.source / "pkg" / "pipe", "../../shared/pipe")


def _into_git(t: Tree, target: str) -> Path:
    """A link into the repository's .git (made here for the plain folder too), where
    `config` may hold a CI token: the wheel would have shipped it."""
    (t.repo / ".git").mkdir(exist_ok=True)
    (t.repo / ".git" / "config").write_bytes(SECRET)
    return _link(t.source / "pkg" / "cfg", target)


HAZARDS: dict[str, tuple[Hazard, str, bool]] = {
    # Regression (security, second round): a link into .git was a source file.
    "file link into .git": (
        lambda t: _into_git(t, "../../.git/config"),
        "leads into .git/",
        False,
    ),
    "folder link into .git": (lambda t: _into_git(t, "../../.git"), "leads into .git/", False),
    # name: (plant, what the message says, needs root)
    "file link to /etc/passwd": (
        lambda t: _link(t.source / "pkg" / "passwd", "/etc/passwd"),
        "leaves the repository",
        False,
    ),
    "file link out by ../": (
        lambda t: _link(t.source / "pkg" / "s", _rel(t.outside / "secret", t.source / "pkg")),
        "leaves the repository",
        False,
    ),
    "folder link to /etc": (
        lambda t: _link(t.source / "pkg" / "etc", "/etc"),
        "leaves the repository",
        False,
    ),
    "folder link out by ../": (
        lambda t: _link(t.source / "data", _rel(t.outside / "folder", t.source)),
        "leaves the repository",
        False,
    ),
    "link to a link that leaves": (_chain, "leaves the repository", False),
    "dangling link out": (
        lambda t: _link(t.source / "gone", "/nonexistent/secret"),
        "leaves the repository",
        False,
    ),
    "link to /dev/zero": (
        lambda t: _link(t.source / "zero", "/dev/zero"),
        "leaves the repository",
        False,
    ),
    "link loop": (_loop, "symlink loop", False),
    "folder link to its parent": (
        lambda t: _link(t.source / "pkg" / "up", ".."),
        "symlink loop",
        False,
    ),
    "folder link inside the repo holding a link out": (
        _shared_folder_with_a_leak,
        "leaves the repository",
        False,
    ),
    "fifo": (lambda t: _fifo(t.source / "pkg" / "pipe"), "named pipe", False),
    "fifo four folders down": (lambda t: _fifo(t.source / "a/b/c/d/pipe"), "named pipe", False),
    "link to a fifo elsewhere in the repo": (
        _link_to_a_pipe_in_the_repository,
        "named pipe",
        False,
    ),
    "unix socket": (lambda t: _socket(t.source / "sock"), "a socket", False),
    "character device": (
        lambda t: _device(t.source / "pkg" / "null", stat.S_IFCHR, 1, 3),
        "character device",
        True,
    ),
    "block device": (
        lambda t: _device(t.source / "pkg" / "disk", stat.S_IFBLK, 7, 0),
        "block device",
        True,
    ),
}


def within(seconds: float, call: Callable[[], object]) -> BaseException | object:
    """Run `call` in a daemon thread; what it returned or raised, or TimeoutError if it hung."""
    box: list[BaseException | object] = []

    def target() -> None:
        try:
            box.append(call())
        except BaseException as exc:  # handed back to the test
            box.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    return box[0] if box else TimeoutError(f"still running after {seconds}s")


@pytest.mark.reliability
def test_hostile_sources_are_refused_naming_the_path(tmp_path: Path) -> None:
    problems: list[str] = []
    cases = 0
    started = time.monotonic()
    for git in (True, False):
        for name, (plant, says, needs_root) in HAZARDS.items():
            if needs_root and not ROOT:
                continue
            cases += 1
            case = f"{name} ({'git' if git else 'plain folder'})"
            tree = make_tree(tmp_path / f"{len(problems)}-{cases}", git=git)
            offender = plant(tree)
            before = snapshot(tree.outside)
            got = within(TIMEOUT, partial(tree_hash, tree.source, "x", root=tree.repo))
            if not isinstance(got, UsageError):
                problems.append(f"{case}: expected UsageError, got {got!r}")
            elif str(offender) not in str(got) or says not in str(got):
                problems.append(f"{case}: message does not name {offender} / {says!r}: {got}")
            if snapshot(tree.outside) != before:
                problems.append(f"{case}: the folder outside the repository changed")
    seconds = time.monotonic() - started
    record(
        "hostile source trees",
        area="archives",
        cases=cases,
        injected=f"{cases // 2} hazards (links out of the repository by absolute and ../ "
        "paths, to files, folders, /dev/zero and through chains; link loops; pipes, "
        "sockets, character and block devices) in a git checkout and in a plain folder",
        result=f"{cases - len(problems)}/{cases} refused with a UsageError naming the path, "
        f"none hung, nothing outside the repository read or changed, {seconds:.1f}s in all",
        figures={"cases": cases, "failures": len(problems), "seconds": round(seconds, 2)},
    )
    assert not problems, "\n".join(problems)


@pytest.mark.reliability
def test_a_source_leaving_the_repository_by_dotdot_is_refused(tmp_path: Path) -> None:
    tree = make_tree(tmp_path, git=False)
    names = [
        tree.source / ".." / ".." / "outside",
        tree.repo / "app" / "pkg" / ".." / ".." / ".." / "outside",
        tree.outside,
    ]
    refused = 0
    for source in names:
        with pytest.raises(UsageError, match="leaves the repository") as caught:
            tree_hash(source, root=tree.repo)
        assert str(source) in str(caught.value)
        refused += 1
    record(
        "source folders named with '..'",
        area="archives",
        cases=len(names),
        injected="source folders whose '..' parts (or absolute path) lead out of the repository",
        result=f"{refused}/{len(names)} refused before any file was read",
        figures={"cases": len(names), "refused": refused},
    )


@pytest.mark.reliability
def test_safe_links_and_ignored_hazards_still_hash(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "git", git=True)
    _link(tree.source / "LICENSE", "../shared/LICENSE")  # inside the repository
    _link(tree.source / "pkg" / "alias.py", "__init__.py")
    _link(tree.source / "pkg" / "dangling", "missing-but-inside")
    _link(tree.source / "docs", "../shared")  # a folder elsewhere in the repository
    (tree.source / ".gitignore").write_text("/env/\n/run/\n")
    _link(tree.source / "env" / "bin" / "python", "/usr/bin/python3")  # a virtualenv, ignored
    _fifo(tree.source / "run" / "server.pipe")  # ignored by git: never read
    names = [
        p.relative_to(tree.source).as_posix() for p in source_files(tree.source, root=tree.repo)
    ]
    assert names == [
        ".gitignore",
        "LICENSE",
        "docs/LICENSE",
        "pkg/__init__.py",
        "pkg/alias.py",
        "pyproject.toml",
    ]
    first = tree_hash(tree.source, root=tree.repo)
    assert tree_hash(tree.source, root=tree.repo) == first
    # A linked file's content is an input: editing the target changes the key.
    (tree.repo / "shared" / "LICENSE").write_text("changed\n")
    assert tree_hash(tree.source, root=tree.repo) != first
    record(
        "safe links and ignored hazards",
        area="archives",
        cases=7,
        injected="links inside the repository (file, folder, dangling), a virtualenv link "
        "and a pipe in git-ignored folders",
        result="all 7 accepted: links inside are hashed through, ignored paths never read",
        figures={"cases": 7},
    )


MANIFEST = """\
schema: 1
project: {name: demo, version: "1.0.0", python: "3.11"}
binaries:
  app: {source: SOURCE, entrypoint: "pkg:main", outputs: [wheel], platforms: [linux/amd64]}
"""


def _cli_repo(folder: Path, source: str = "app") -> Tree:
    tree = make_tree(folder, git=True)
    (tree.source / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        '[project]\nname = "app"\nversion = "1.0.0"\n'
    )
    (tree.repo / "binaries.yaml").write_text(MANIFEST.replace("SOURCE", source))
    (tree.repo / ".gitignore").write_text("/dist/\n")
    git = ["git", "-C", str(tree.repo), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    return tree


def _digests(folder: Path) -> set[str]:
    return {hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()}


CLI_HAZARDS = {
    "file link to the sentinel": (
        lambda t: _link(t.source / "pkg" / "s", t.outside / "secret"),
        "leaves the repository",
    ),
    "folder link out": (lambda t: _link(t.source / "data", t.outside / "folder"), "leaves"),
    "fifo": (lambda t: _fifo(t.source / "pkg" / "pipe"), "named pipe"),
    "link loop": (_loop, "symlink loop"),
    **(
        {
            "character device": (
                lambda t: _device(t.source / "pkg" / "null", stat.S_IFCHR, 1, 3),
                "character device",
            )
        }
        if ROOT
        else {}
    ),
}


@pytest.mark.reliability
def test_the_cli_exits_2_naming_the_path_and_writes_nothing_outside(tmp_path: Path) -> None:
    problems: list[str] = []
    runs = 0
    started = time.monotonic()
    cases: list[tuple[str, Callable[[Tree], Path] | None, str, str]] = [
        (name, plant, says, "app") for name, (plant, says) in CLI_HAZARDS.items()
    ]
    cases += [
        ("source with '..' parts", None, "leaves the repository", "app/../../outside"),
        ("source folder is a link out", None, "leaves the repository", "linked"),
    ]
    for name, plant, says, source in cases:
        runs += 1
        tree = _cli_repo(tmp_path / str(runs), source)
        if source == "linked":
            _link(tree.repo / "linked", tree.outside / "folder")
        offender = plant(tree) if plant else None
        before = snapshot(tree.outside)
        cache = tmp_path / f"cache-{runs}"
        command = [sys.executable, "-m", "shipyard", "build", f"--cache-dir={cache}"]
        try:
            done = subprocess.run(
                command,
                cwd=tree.repo,
                capture_output=True,
                text=True,
                timeout=120,
                env={**os.environ, "CI": "1"},
                check=False,
            )
        except subprocess.TimeoutExpired:
            problems.append(f"{name}: the build hung")
            continue
        err = done.stderr
        if done.returncode != 2:
            problems.append(f"{name}: exit {done.returncode}, expected 2: {err[-500:]}")
        if "Traceback" in err or says not in err:
            problems.append(f"{name}: expected one message saying {says!r}: {err[-800:]}")
        if offender is not None and str(offender) not in err:
            problems.append(f"{name}: the message does not name {offender}: {err[-800:]}")
        if list((tree.repo / "dist").rglob("*.whl")):
            problems.append(f"{name}: a wheel was written")
        if snapshot(tree.outside) != before:
            problems.append(f"{name}: the folder outside the repository changed")
        leaked = _digests(tree.repo / "dist") | (_digests(cache) if cache.exists() else set())
        if hashlib.sha256(SECRET).hexdigest() in leaked:
            problems.append(f"{name}: the file outside was copied into dist/ or the cache")
    seconds = time.monotonic() - started
    record(
        "hostile sources through the CLI",
        area="archives",
        cases=runs,
        injected=f"`shipyard build` on {runs} repositories whose source holds a link out "
        "(file, folder, loop), a pipe or a device, or whose source path leaves the repository",
        result=f"{runs - len(problems)}/{runs} exited 2 with one message naming the path, no "
        f"traceback, no wheel, nothing outside changed or copied in, {seconds:.1f}s in all",
        figures={"cases": runs, "failures": len(problems), "seconds": round(seconds, 2)},
    )
    assert not problems, "\n".join(problems)
