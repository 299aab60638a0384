"""Issue 12, item 7: local cache entries are untrusted input.

An entry with an absolute `path`, a `path` or `sha256` with `../`, an odd mode, or
a blob whose bytes are not its sha256 (same size) was trusted as written: files
were copied from outside the cache and written outside dist/. Each such entry
must now be a miss with a warning, the entry dropped, nothing written outside
the action's declared outputs, and the action built for real.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from shipyard._fs import sha256_file
from shipyard.engine.cache.local import ActionCache
from shipyard.engine.keys import ActionKey, Inputs
from shipyard.engine.plan import Action
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import Artifact, BuildContext
from shipyard.stamp import Stamp
from tests.reliability import record

KEY = ActionKey.of("wheel", {}).digest  # the Honest builder declares no inputs
ABOUT = {"kind": "wheel", "binary": "", "platform": "py3-none-any", "metadata": {}}
GOOD = b"content a"  # what the honest build writes
EVIL = b"#!/bin/sh\necho owned > /tmp/owned\n"
HOOK = b"#!/bin/sh\necho the real hook\n"


class Honest:
    """A wheel builder: writes dist/wheels/x.whl (never through a link); counts builds."""

    kind = "wheel"

    def __init__(self) -> None:
        self.builds = 0

    def inputs(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Inputs:
        return {}

    def build(
        self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], key: ActionKey
    ) -> tuple[Artifact, ...]:
        self.builds += 1
        out = ctx.dist / "wheels" / "x.whl"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.unlink(missing_ok=True)
        out.write_bytes(GOOD)
        return (Artifact("wheel", "", "py3-none-any", out, sha256_file(out), len(GOOD)),)


@dataclass
class Scene:
    """A checkout (`repo`), a cache, a folder outside both, and the honest entry."""

    tmp: Path
    repo: Path
    cache: ActionCache
    outside: Path
    ctx: BuildContext
    action: Action
    builder: Honest

    @property
    def entry(self) -> Path:
        return self.cache.actions / f"{KEY}.json"

    def blob(self, data: bytes) -> str:
        """Put `data` in the cache's blobs (as an attacker with write access would)."""
        digest = hashlib.sha256(data).hexdigest()
        (self.cache.blobs / digest).write_bytes(data)
        return digest

    def poison(self, **output: object) -> None:
        """Replace the entry's single output with the honest one updated by `output`."""
        honest: dict[str, object] = {"path": "dist/wheels/x.whl", "size": len(GOOD)}
        honest["mode"] = 0o644
        honest["artifact"] = ABOUT
        if "sha256" not in output:
            honest["sha256"] = self.blob(GOOD)
        self.entry.write_text(json.dumps({"key": KEY, "outputs": [{**honest, **output}]}))


def _scene(tmp_path: Path) -> Scene:
    repo = tmp_path / "repo"
    (repo / ".git" / "hooks").mkdir(parents=True)
    (repo / ".git" / "hooks" / "pre-commit").write_bytes(HOOK)
    (repo / "Makefile").write_text("all:\n\ttrue\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"a secret outside the cache\n")
    ctx = BuildContext(repo, repo / "dist", Stamp("1", None, False, 0), "3.11", {})
    action = Action("wheel:x", "wheel", ("x",), repo)
    cache = ActionCache(tmp_path / "cache")
    builder = Honest()
    wrapped(builder, cache).run(action, ctx, ())  # the honest entry and blob
    (ctx.dist / "wheels" / "x.whl").unlink()  # a clean checkout: the restore must write
    return Scene(tmp_path, repo, cache, outside, ctx, action, builder)


def _snapshot(root: Path, skip: tuple[Path, ...]) -> dict[str, tuple[str, int]]:
    """Every file and link under `root` but `skip`: its bytes' digest (or target) and mode."""
    seen: dict[str, tuple[str, int]] = {}
    for path in sorted(root.rglob("*")):
        if any(path == s or s in path.parents for s in skip):
            continue
        facts = path.lstat()
        if stat.S_ISLNK(facts.st_mode):
            seen[str(path.relative_to(root))] = ("-> " + os.readlink(path), facts.st_mode)
        elif stat.S_ISREG(facts.st_mode):
            seen[str(path.relative_to(root))] = (sha256_file(path), facts.st_mode)
    return seen


# Each attack: a name and what it does to the scene (poison the entry, plant a file).
Attack = Callable[[Scene], None]


def _same_size_other_bytes(scene: Scene) -> None:
    digest = scene.blob(GOOD)
    (scene.cache.blobs / digest).write_bytes(EVIL[: len(GOOD)].ljust(len(GOOD), b"#"))
    scene.poison(sha256=digest)


def _blob_links_outside(scene: Scene) -> None:
    secret = (scene.outside / "secret").read_bytes()
    digest = hashlib.sha256(secret).hexdigest()
    (scene.cache.blobs / digest).symlink_to(scene.outside / "secret")
    scene.poison(sha256=digest, size=len(secret))


def _traversal_sha(scene: Scene) -> None:
    secret = scene.outside / "secret"
    # From cache/v1/blobs/ up to the folder holding cache/ and outside/.
    scene.poison(sha256="../../../outside/secret", size=secret.stat().st_size)


def _absolute_sha(scene: Scene) -> None:
    secret = scene.outside / "secret"
    scene.poison(sha256=str(secret), size=secret.stat().st_size)


def _no_outputs(scene: Scene) -> None:
    scene.entry.write_text(json.dumps({"key": KEY, "outputs": []}))


ATTACKS: dict[str, Attack] = {
    "absolute path": lambda s: s.poison(
        path=str(s.outside / "dropped"), sha256=s.blob(EVIL), size=len(EVIL)
    ),
    "path with ../ out of the checkout": lambda s: s.poison(
        path="../outside/dropped", sha256=s.blob(EVIL), size=len(EVIL)
    ),
    "path into .git/hooks": lambda s: s.poison(
        path=".git/hooks/pre-commit", sha256=s.blob(EVIL), size=len(EVIL), mode=0o755
    ),
    "path through dist/../.git": lambda s: s.poison(
        path="dist/../.git/hooks/pre-commit", sha256=s.blob(EVIL), size=len(EVIL)
    ),
    "path Makefile": lambda s: s.poison(path="Makefile", sha256=s.blob(EVIL), size=len(EVIL)),
    "path dist/../Makefile": lambda s: s.poison(
        path="dist/../Makefile", sha256=s.blob(EVIL), size=len(EVIL)
    ),
    "path not normalised": lambda s: s.poison(path="dist//wheels/./x.whl"),
    "path in dist/ but not the action's": lambda s: s.poison(path="dist/zipapps/x-1.pyz"),
    "hidden path in dist/": lambda s: s.poison(path="dist/wheels/.x.whl"),
    "sha256 with ../": _traversal_sha,
    "sha256 absolute": _absolute_sha,
    "sha256 upper case": lambda s: s.poison(sha256=s.blob(GOOD).upper()),
    "mode 6777": lambda s: s.poison(mode=0o6777),
    "mode 777": lambda s: s.poison(mode=0o777),
    "mode 4755": lambda s: s.poison(mode=0o4755),
    "blob with other bytes, same size": _same_size_other_bytes,
    "blob is a link out of the cache": _blob_links_outside,
    "size not a number": lambda s: s.poison(size="9"),
    "no outputs": _no_outputs,
}


def _attempt(tmp_path: Path, name: str, caplog: pytest.LogCaptureFixture) -> list[str]:
    """Run one attack through the engine's wrapper; the problems seen (empty: it failed)."""
    scene = _scene(tmp_path)
    cache_root = scene.cache.root.parent
    ATTACKS[name](scene)
    poisoned = scene.entry.read_bytes()
    before = _snapshot(scene.tmp, (scene.repo / "dist", cache_root))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="shipyard"):
        outcome = wrapped(scene.builder, scene.cache).run(scene.action, scene.ctx, ())
    problems: list[str] = []
    after = _snapshot(scene.tmp, (scene.repo / "dist", cache_root))
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if changed:
        problems.append(f"written outside the declared outputs: {changed}")
    if outcome.cached or scene.builder.builds != 2:
        problems.append("the poisoned entry was used as a hit instead of building")
    dist = {str(p.relative_to(scene.ctx.dist)): p for p in scene.ctx.dist.rglob("*")}
    # dist/.checked.json: the checkout's record of outputs verified in place (cache.local)
    files = {k: p for k, p in dist.items() if not p.is_dir() and k != ".checked.json"}
    if set(files) != {"wheels/x.whl"}:
        problems.append(f"dist/ holds {sorted(files)}")
    for rel, path in files.items():
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode not in (0o644, 0o755) or path.is_symlink():
            problems.append(f"dist/{rel} has mode {mode:o}")
    output = scene.ctx.dist / "wheels" / "x.whl"
    if not output.is_file() or output.read_bytes() != GOOD:
        problems.append("the output does not hold the honest build's bytes")
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    if not any("ignored" in m for m in warned):
        problems.append(f"no warning was logged ({warned})")
    if scene.entry.exists() and scene.entry.read_bytes() == poisoned:
        problems.append("the poisoned entry is still in the cache")
    for blob in scene.cache.blobs.iterdir():
        if blob.is_file() and not blob.is_symlink() and sha256_file(blob) != blob.name:
            problems.append(f"blob {blob.name} with other bytes kept")
    return problems


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_a_poisoned_local_entry_is_a_miss_that_writes_nothing(
    name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    problems = _attempt(tmp_path, name, caplog)
    assert not problems, f"{name}: " + "; ".join(problems)


def test_restore_refuses_a_link_planted_in_dist(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    scene = _scene(tmp_path)
    (scene.ctx.dist / "wheels").rmdir()
    (scene.ctx.dist / "wheels").symlink_to(scene.outside)  # dist/wheels -> outside/
    with caplog.at_level(logging.WARNING, logger="shipyard"):
        assert scene.cache.restore(KEY, scene.repo) is None
    assert sorted(p.name for p in scene.outside.iterdir()) == ["secret"]
    assert any("symbolic link" in r.getMessage() for r in caplog.records)


def test_restore_replaces_a_link_at_the_output_itself_without_following_it(
    tmp_path: Path,
) -> None:
    scene = _scene(tmp_path)
    target = scene.ctx.dist / "wheels" / "x.whl"
    target.symlink_to(scene.outside / "secret")
    restored = scene.cache.restore(KEY, scene.repo)
    assert restored is not None
    assert not target.is_symlink() and target.read_bytes() == GOOD
    assert (scene.outside / "secret").read_bytes() == b"a secret outside the cache\n"


@pytest.mark.reliability
def test_reliability_poisoned_local_cache_entries(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rounds = int(os.environ.get("SHIPYARD_CACHE_ATTACK_ROUNDS", "1"))
    attempts = successes = 0
    failures: list[str] = []
    for round_ in range(rounds):
        for number, name in enumerate(sorted(ATTACKS)):
            problems = _attempt(tmp_path / f"r{round_}-{number}", name, caplog)
            attempts += 1
            if problems:
                successes += 1
                failures.append(f"{name}: {'; '.join(problems)}")
    record(
        "poisoned local cache entries",
        area="local cache",
        cases=attempts,
        injected=f"{len(ATTACKS)} kinds of crafted entry ({', '.join(sorted(ATTACKS))}), "
        f"{rounds} round(s), each restored by a build from a clean dist/",
        result=f"{successes} of {attempts} attacks succeeded: each was a miss with a "
        "warning, the entry dropped, nothing written outside the declared outputs, "
        "modes 644/755, the output rebuilt",
        figures={"attempts": attempts, "successes": successes, "kinds": len(ATTACKS)},
    )
    assert not failures, "\n".join(failures)
