"""uv.lock read with tomllib: the locked third-party set of each package, and its export.

A package's slice is what it needs at run time: the packages reached from it through
`dependencies` and the `optional-dependencies` of the extras each edge asks for, walking
through the repository's own packages (workspace members, path packages) without keeping
them, and never through `dev-dependencies`. Markers are ignored, so a slice is the union
over every platform.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from shipyard import _toml
from shipyard.errors import ShipyardError
from shipyard.workspace._text import Positions, Where, WorkspaceError

if TYPE_CHECKING:
    from shipyard.workspace.projects import Workspace

__all__ = ["Lock", "LockedPackage", "check_lock", "export_requirements"]

# Sources of packages that are the repository's own code, never fetched from anywhere.
_LOCAL_SOURCES = ("editable", "virtual", "directory")
_ARCHIVES = (".whl", ".tar.gz", ".zip", ".tar.bz2", ".tgz")
_RELOCK = "run `uv lock`"


@dataclass(frozen=True)
class LockedPackage:
    """One third-party package as uv.lock pins it."""

    name: str
    version: str
    source: str
    hashes: tuple[str, ...]


def _source_text(source: dict[str, Any]) -> str:
    """ "registry", "git+URL", "url:URL", "path:P" ...: what identifies where it comes from."""
    if "registry" in source:
        return "registry"
    if "git" in source:
        return f"git+{source['git']}"
    for kind in ("url", "path", *_LOCAL_SOURCES):
        if kind in source:
            return f"{kind}:{source[kind]}"
    return json.dumps(source, sort_keys=True)


class Lock:
    """A parsed uv.lock: its packages by canonical name and which of them are in-repo."""

    def __init__(self, path: Path, data: dict[str, Any], text: str) -> None:
        self.path = path
        self._text = text
        self._slices: dict[tuple[str, tuple[str, ...]], tuple[LockedPackage, ...]] = {}
        self.packages: dict[str, list[dict[str, Any]]] = {}
        """Raw `[[package]]` tables by canonical name (several when resolutions fork)."""
        raw = data.get("package", [])
        if not isinstance(data.get("version"), int) or not isinstance(raw, list):
            self._malformed((), "uv.lock has no `version` or its `package` is not a list")
        for index, package in enumerate(raw):
            if (
                not isinstance(package, dict)
                or not isinstance(package.get("name"), str)
                or not isinstance(package.get("source", {}), dict)
            ):
                self._malformed(("package", index), "a [[package]] without a name or a source")
            self.packages.setdefault(canonicalize_name(package["name"]), []).append(package)
        manifest = data.get("manifest", {})
        self.manifest: dict[str, Any] = manifest if isinstance(manifest, dict) else {}
        """The lock's `[manifest]`: members, constraints, overrides ... as uv wrote them."""
        listed = manifest.get("members", []) if isinstance(manifest, dict) else []
        self.workspace_members: frozenset[str] = frozenset(
            canonicalize_name(n) for n in listed if isinstance(n, str)
        )
        """`[manifest] members` (empty for a lock of a single project)."""
        self.members: frozenset[str] = (
            frozenset(
                name
                for name, packages in self.packages.items()
                if any(self._in_repo(p) for p in packages)
            )
            | self.workspace_members
        )
        try:
            rp = data.get("requires-python")
            self.requires_python = SpecifierSet(rp) if isinstance(rp, str) else None
        except InvalidSpecifier:
            self.requires_python = None

    def _malformed(self, key: tuple[str | int, ...], problem: str) -> NoReturn:
        line, col = Positions(self._text).find(key) if key else (1, 1)
        raise WorkspaceError(Where(self.path, line, col), problem, _RELOCK)

    def _in_repo(self, package: dict[str, Any]) -> bool:
        source = package.get("source", {})
        if any(kind in source for kind in _LOCAL_SOURCES):
            return True
        path = source.get("path")
        if isinstance(path, str) and not path.endswith(_ARCHIVES):
            return (self.path.parent / path).resolve().is_relative_to(self.path.parent.resolve())
        return False

    @classmethod
    def load(cls, path: Path) -> Lock:
        """Read and parse `path`; a WorkspaceError naming it if it is not a uv.lock."""
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise WorkspaceError(
                Where(path, 1, 1), f"cannot read uv.lock: {error}", _RELOCK
            ) from None
        return cls.parse(text, path)

    @classmethod
    def parse(cls, text: str, path: Path) -> Lock:
        """Parse uv.lock text; `path` is where it is (relative sources resolve from it)."""
        try:
            data = _toml.loads(text)
        except tomllib.TOMLDecodeError as error:
            message = str(error)
            line, col = 1, 1
            if "(at line " in message:
                place = message.rsplit("(at line ", 1)[1].rstrip(")").split(", column ")
                line, col = int(place[0]), int(place[1])
                message = message.rsplit(" (at line ", 1)[0]
            raise WorkspaceError(
                Where(path, line, col), f"uv.lock is not valid TOML: {message}", _RELOCK
            ) from None
        return cls(path, data, text)

    @property
    def text(self) -> str:
        """The lock's text as it was read."""
        return self._text

    def member(self, key: str) -> dict[str, Any] | None:
        """The raw `[[package]]` of in-repo package `key`, if the lock has it."""
        for package in self.packages.get(key, []):
            if self._in_repo(package):
                return package
        return None

    def _target(self, owner: str, dep: dict[str, Any]) -> dict[str, Any]:
        name = canonicalize_name(str(dep.get("name", "")))
        candidates = self.packages.get(name, [])
        if len(candidates) > 1:
            candidates = [
                p
                for p in candidates
                if dep.get("version", p.get("version")) == p.get("version")
                and dep.get("source", p.get("source")) == p.get("source")
            ]
        if not candidates:
            raise WorkspaceError(
                Where(self.path, 1, 1),
                f"`{owner}` depends on `{name}`, which uv.lock does not hold",
                _RELOCK,
            )
        return candidates[0]

    def slice(self, key: str, extras: Sequence[str] = ()) -> tuple[LockedPackage, ...]:
        """The third-party packages `key` (with its `extras`) needs at run time, by name."""
        key = canonicalize_name(key)
        chosen = tuple(sorted({canonicalize_name(e) for e in extras}))
        if (key, chosen) in self._slices:
            return self._slices[(key, chosen)]
        start = self.member(key) or next(iter(self.packages.get(key, [])), None)
        if start is None:
            raise WorkspaceError(
                Where(self.path, 1, 1), f"`{key}` is not a package of uv.lock", _RELOCK
            )
        seen: set[tuple[int, str]] = set()
        found: dict[int, dict[str, Any]] = {}
        todo: list[tuple[dict[str, Any], str]] = [(start, ""), *((start, e) for e in chosen)]
        while todo:
            package, extra = todo.pop()
            if (id(package), extra) in seen:
                continue
            seen.add((id(package), extra))
            if package is not start and not self._in_repo(package):
                found[id(package)] = package
            edges = (
                package.get("optional-dependencies", {}).get(extra, [])
                if extra
                else package.get("dependencies", [])
            )
            for dep in edges:
                target = self._target(package["name"], dep)
                todo.append((target, ""))
                todo.extend((target, canonicalize_name(e)) for e in dep.get("extra", []))
        result = tuple(
            sorted(
                (
                    LockedPackage(
                        name=canonicalize_name(p["name"]),
                        version=str(p.get("version", "")),
                        source=_source_text(p.get("source", {})),
                        hashes=_hashes(p),
                    )
                    for p in found.values()
                ),
                key=lambda lp: (lp.name, lp.version, lp.source),
            )
        )
        self._slices[(key, chosen)] = result
        return result

    def slice_digest(self, key: str, extras: Sequence[str] = ()) -> str:
        """sha256 (hex) of the canonical JSON of `slice(key, extras)`: equal slices, equal
        digests."""
        rows = [[p.name, p.version, p.source, list(p.hashes)] for p in self.slice(key, extras)]
        text = json.dumps(rows, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def groups(self, key: str, roots: Sequence[str] = ()) -> tuple[str, tuple[str, ...]]:
        """What the dependency groups of `key` (and of the in-repo packages `roots`, say
        the workspace's root project, whose groups uv installs with a member's) bring:
        the sha256 of their locked tables with each package's run-time slice, and the
        in-repo packages they name. ('', ()) when none has a group."""
        rows: list[object] = []
        in_repo: set[str] = set()
        for owner in (canonicalize_name(key), *(canonicalize_name(r) for r in roots)):
            package = self.member(owner)
            groups = package.get("dev-dependencies", {}) if package else {}
            if not isinstance(groups, dict):
                continue
            for group, deps in sorted(groups.items()):
                for dep in deps if isinstance(deps, list) else []:
                    if not isinstance(dep, dict):
                        continue
                    target = self._target(owner, dep)
                    name = canonicalize_name(target["name"])
                    extras = sorted(str(e) for e in dep.get("extra", []))
                    if self._in_repo(target):
                        in_repo.add(name)
                    rows.append(
                        [owner, group, name, str(target.get("version", "")),
                         _source_text(target.get("source", {})), list(_hashes(target)),
                         self.slice_digest(name, extras)]
                    )  # fmt: skip
        if not rows:
            return "", ()
        text = json.dumps(rows, separators=(",", ":"), ensure_ascii=True, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest(), tuple(sorted(in_repo - {key}))


def _hashes(package: dict[str, Any]) -> tuple[str, ...]:
    files = [package.get("sdist") or {}, *package.get("wheels", [])]
    return tuple(sorted({f["hash"] for f in files if isinstance(f.get("hash"), str)}))


def export_requirements(
    workspace: Workspace, key: str, dest: Path, *, uv: str, extras: Sequence[str] = ()
) -> Path:
    """Write `dest`: the hash-pinned requirements of `key`'s locked third-party slice,
    with the dependencies of its `extras`.

    In-repo packages and dev groups never appear. A ShipyardError carries uv's message if
    uv fails."""
    lock = workspace.lock
    if lock is None:
        raise WorkspaceError(
            Where(workspace.root / "uv.lock", 1, 1), "the repository has no uv.lock", _RELOCK
        )
    package = lock.member(key)
    name = str(package["name"]) if package else key
    command = [
        uv, "export", "--frozen", "--no-config", "--package", name, "--no-default-groups",
        "--no-dev", "--no-emit-workspace", "--no-header", "--no-annotate",
        "--format", "requirements-txt", "--output-file", str(dest),
    ]  # fmt: skip
    for member in sorted(lock.members):
        command += ["--no-emit-package", member]
    for extra in extras:
        command += ["--extra", extra]
    dest.parent.mkdir(parents=True, exist_ok=True)
    from shipyard.process import installer_env

    done = subprocess.run(
        command, cwd=workspace.root, env=installer_env(os.environ), capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise ShipyardError(
            f"uv export of the locked dependencies of {name} failed:\n{done.stderr.strip()}"
        )
    return dest


from shipyard.workspace._uvcheck import check_lock  # noqa: E402  (it needs Lock defined)
