"""A crafted cache entry is a miss, never a failure (issue 12, items 4 and 7, review F5).

A restore turned only its own refusals into a miss; any OSError (a name longer
than the file system allows, an output that is also another's folder) failed the
build, every time, since the poisoned entry stays in a shared cache, and could
leave part of its files written. Artifacts the action does not make were written
first and refused after. A record of outputs verified in place lived in the
shared cache folder, where anyone with write access could vouch for any bytes.

Each crafted entry must now be a miss with a warning, with nothing written or
made in dist/ by the restore (the builder sees dist/ as it was), and the action
built for real; through the local cache and through the remote one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from shipyard._fs import sha256_file
from shipyard.engine.cache.checks import (
    Declared,
    RefusedEntry,
    checked_description,
    checked_path,
)
from shipyard.engine.cache.local import ActionCache
from shipyard.engine.cache.remote import ARTIFACT_TYPE, RemoteCache
from shipyard.engine.cache.restore import PlacedFile, place_files
from shipyard.engine.keys import ActionKey, Inputs
from shipyard.engine.plan import Action
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import Artifact, BuildContext
from shipyard.oci.remote.registry import MEDIA_OCI_MANIFEST
from shipyard.oci.remote.transport import NotFound
from shipyard.stamp import Stamp
from tests.reliability import record

KEY = ActionKey.of("image", {}).digest  # the Imager declares no inputs
PLATFORM = "linux/amd64"
GOOD = b'{"schemaVersion": 2}'  # the honest build's index.json
EVIL = b"#!/bin/sh\necho owned\n"
APP = "dist/images/app/"


def _about(binary: str = "app", kind: str = "image-layout") -> dict[str, object]:
    return {"kind": kind, "binary": binary, "platform": PLATFORM, "metadata": {}}


def _tree(root: Path) -> dict[str, str]:
    """Every file, folder and link under `root` (dist/), without the verified-outputs record."""
    seen: dict[str, str] = {}
    if not root.exists():
        return seen
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if name == ".checked.json":
            continue
        facts = path.lstat()
        if stat.S_ISDIR(facts.st_mode):
            seen[name] = "folder"
        elif stat.S_ISLNK(facts.st_mode):
            seen[name] = "-> " + os.readlink(path)
        else:
            seen[name] = sha256_file(path)
    return seen


class Imager:
    """An image builder: writes dist/images/app/index.json; notes dist/ as each build finds it."""

    kind = "image"

    def __init__(self) -> None:
        self.found: list[dict[str, str]] = []

    def inputs(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Inputs:
        return {}

    def build(
        self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], key: ActionKey
    ) -> tuple[Artifact, ...]:
        self.found.append(_tree(ctx.dist))
        out = ctx.dist / "images" / "app" / "index.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(GOOD)
        return (Artifact("image-layout", "app", PLATFORM, out, sha256_file(out), len(GOOD)),)


@dataclass
class Output:
    """One output a crafted entry names."""

    path: str
    data: bytes = EVIL
    about: dict[str, object] = field(default_factory=_about)
    served: bytes | None = None  # other bytes the store holds under `data`'s digest


# Each attack: the outputs of the crafted entry. None of them may be written.
ATTACKS: dict[str, list[Output]] = {
    "a name of 256 bytes": [Output(APP + "a" * 256)],
    "a folder name of 300 bytes": [Output(APP + "b" * 300 + "/x")],
    "a path longer than PATH_MAX": [Output(APP + "/".join(["c" * 250] * 20))],
    "an output that is another's folder": [
        Output(APP + "z"),
        Output(APP + "a"),
        Output(APP + "a/b"),
    ],
    "a folder made, then a blob with other bytes": [
        Output(APP + "new/deeper/x"),
        Output(APP + "y", data=GOOD, served=EVIL[: len(GOOD)].ljust(len(GOOD), b"#")),
    ],
    "an artifact of another binary": [Output(APP + "evil.json", about=_about("other"))],
    "an artifact of another kind": [
        Output("dist/images/app-1-linux_amd64.tar", about=_about(kind="zipapp"))
    ],
    "an artifact for another platform": [
        Output(APP + "evil.json", about={**_about(), "platform": "linux/s390x"})
    ],
    "a path that is no UTF-8": [Output(APP + "\ud800")],
}


@dataclass
class Scene:
    """A clean checkout and an image action, built once honestly into the cache."""

    repo: Path
    ctx: BuildContext
    action: Action
    builder: Imager


def _scene(tmp_path: Path) -> Scene:
    repo = tmp_path / "repo"
    repo.mkdir(parents=True)
    ctx = BuildContext(repo, repo / "dist", Stamp("1", None, False, 0), "3.11", {})
    action = Action("image:app", "image", ("app",), repo, platforms=(PLATFORM,))
    return Scene(repo, ctx, action, Imager())


class LocalStore:
    """The local cache, poisoned as anyone who can write a shared cache folder could."""

    def __init__(self, tmp: Path) -> None:
        self.cache = ActionCache(tmp / "cache")

    def poison(self, outputs: list[Output]) -> None:
        self.cache.open()
        self.cache.blobs.mkdir(parents=True, exist_ok=True)
        self.cache.actions.mkdir(parents=True, exist_ok=True)
        listed = []
        for out in outputs:
            digest = hashlib.sha256(out.data).hexdigest()
            (self.cache.blobs / digest).write_bytes(out.served or out.data)
            listed.append(
                {
                    "path": out.path,
                    "sha256": digest,
                    "size": len(out.data),
                    "mode": 0o644,
                    "artifact": out.about,
                }
            )
        entry = json.dumps({"key": KEY, "outputs": listed}).encode()
        (self.cache.actions / f"{KEY}.json").write_bytes(entry)

    def warning(self) -> str:
        return "local cache entry"


class HostileRegistry:
    """A registry, in this process, whose cache repository anyone may push to."""

    host = "127.0.0.9:5000"

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[str, bytes] = {}

    def get_manifest(self, repo: str, reference: str, accept: object) -> tuple[bytes, str, str]:
        if reference not in self.manifests:
            raise NotFound(self.host, f"GET manifest {repo}:{reference}", "not found", status=404)
        data = self.manifests[reference]
        return data, MEDIA_OCI_MANIFEST, "sha256:" + hashlib.sha256(data).hexdigest()

    def pull_blob(self, repo: str, digest: str, dest: Path, *, size: int | None = None) -> int:
        if digest not in self.blobs:
            raise NotFound(self.host, f"GET blob {digest}", "not found", status=404)
        dest.write_bytes(self.blobs[digest])
        return len(self.blobs[digest])

    def push_blob(self, repo: str, digest: str, size: int, path: Path) -> bool:
        self.blobs[digest] = path.read_bytes()
        return True

    def put_manifest(self, repo: str, reference: str, data: bytes, media_type: str) -> str:
        self.manifests[reference] = data
        return "sha256:" + hashlib.sha256(data).hexdigest()


class RemoteStore:
    """The remote cache in a registry that serves what an attacker pushed (and, for a
    blob, other bytes than its digest: the registry client checks those, so only a
    hostile registry behind it gets them past; here the restore must)."""

    def __init__(self, tmp: Path) -> None:
        self.registry = HostileRegistry()
        self.cache = RemoteCache(self.registry, "cache")  # type: ignore[arg-type]

    def poison(self, outputs: list[Output]) -> None:
        layers = []
        for out in outputs:
            digest = "sha256:" + hashlib.sha256(out.data).hexdigest()
            self.registry.blobs[digest] = out.served or out.data
            notes = {
                "org.opencontainers.image.title": out.path,
                "dev.shipyard.mode": "644",
                "dev.shipyard.artifact": json.dumps(out.about),
            }
            layers.append({"digest": digest, "size": len(out.data), "annotations": notes})
        manifest = {"schemaVersion": 2, "artifactType": ARTIFACT_TYPE, "layers": layers}
        self.registry.manifests[KEY] = json.dumps(manifest).encode()

    def warning(self) -> str:
        return "remote cache entry"


STORES: dict[str, Callable[[Path], LocalStore | RemoteStore]] = {
    "local": LocalStore,
    "remote": RemoteStore,
}


def _attempt(
    tmp_path: Path, store_name: str, name: str, caplog: pytest.LogCaptureFixture
) -> list[str]:
    """Build the image action from a crafted entry; the problems seen (empty: refused)."""
    scene = _scene(tmp_path)
    store = STORES[store_name](tmp_path)
    store.poison(ATTACKS[name])
    before = _tree(scene.ctx.dist)
    caplog.clear()
    problems: list[str] = []
    try:
        with caplog.at_level(logging.WARNING, logger="shipyard"):
            outcome = wrapped(scene.builder, store.cache).run(scene.action, scene.ctx, ())
    except Exception as exc:  # the bug: the build failed instead of missing
        leftover = sorted(set(_tree(scene.ctx.dist)) - set(before))
        return [f"the build failed: {type(exc).__name__}: {exc}; dist/ gained {leftover}"]
    if outcome.cached or len(scene.builder.found) != 1:
        problems.append("the crafted entry was used as a hit instead of building")
    elif scene.builder.found[0] != before:
        made = sorted(set(scene.builder.found[0]) - set(before))
        problems.append(f"the restore wrote before the build: {made}")
    if _tree(scene.ctx.dist) != {"images": "folder", "images/app": "folder", **_index()}:
        problems.append(f"dist/ holds {sorted(_tree(scene.ctx.dist))}")
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    if not any(store.warning() in m and "ignored" in m for m in warned):
        problems.append(f"no warning that the entry was ignored ({warned})")
    return problems


def _index() -> dict[str, str]:
    return {"images/app/index.json": hashlib.sha256(GOOD).hexdigest()}


@pytest.mark.parametrize("store", sorted(STORES))
@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_a_crafted_entry_is_a_warned_miss_that_writes_nothing(
    name: str, store: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    problems = _attempt(tmp_path, store, name, caplog)
    assert not problems, f"{store} {name}: " + "; ".join(problems)


@pytest.mark.parametrize("store", sorted(STORES))
def test_a_long_name_that_fits_restores(store: str, tmp_path: Path) -> None:
    # 250 bytes is a valid name; the temporary beside it once was ".tmp-<name>.<hex>": too long.
    scene = _scene(tmp_path)
    cache = STORES[store](tmp_path)
    cache.poison([Output(APP + "a" * 250, data=GOOD)])
    outcome = wrapped(scene.builder, cache.cache).run(scene.action, scene.ctx, ())
    assert outcome.cached and scene.builder.found == []
    assert (scene.ctx.dist / "images" / "app" / ("a" * 250)).read_bytes() == GOOD


def test_a_failed_rename_puts_back_what_was_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # All or none even when the file system fails part-way through the renames.
    repo = tmp_path / "repo"
    app = repo / "dist" / "images" / "app"
    app.mkdir(parents=True)
    (app / "one").write_bytes(b"old one")
    blob = tmp_path / "blob"
    blob.write_bytes(GOOD)
    digest = hashlib.sha256(GOOD).hexdigest()
    declared = Declared((("dist", "images", "app", "**"),))
    files = [
        PlacedFile(
            blob,
            checked_path(APP + n, declared),
            digest,
            len(GOOD),
            0o644,
            checked_description(_about()),
        )
        for n in ("one", "two", "three")
    ]
    real = os.replace
    calls: list[str] = []

    def failing(src: str, dst: str, **kwargs: int) -> None:
        calls.append(dst)
        if dst == "three":
            raise OSError(28, "No space left on device")
        real(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(RefusedEntry, match="nothing was kept"):
        place_files(repo, files)
    monkeypatch.undo()
    assert "three" in calls
    assert _tree(repo / "dist") == {
        "images": "folder",
        "images/app": "folder",
        "images/app/one": hashlib.sha256(b"old one").hexdigest(),
    }


def test_a_record_in_the_shared_cache_vouches_for_nothing(tmp_path: Path) -> None:
    # Whoever writes the shared cache folder wrote v1/checked/<repo>.json: a stale
    # output with the right stat facts passed, unhashed, for the entry's bytes.
    scene = _scene(tmp_path)
    store = LocalStore(tmp_path)
    wrapped(scene.builder, store.cache).run(scene.action, scene.ctx, ())
    index = scene.ctx.dist / "images" / "app" / "index.json"
    index.write_bytes(b'{"schemaVersion": 9}')  # stale bytes of the same size
    assert len(index.read_bytes()) == len(GOOD)
    facts = index.stat()
    vouched = [facts.st_size, facts.st_mtime_ns, facts.st_ctime_ns, facts.st_ino]
    forged = {str(index): [*vouched, hashlib.sha256(GOOD).hexdigest()]}
    name = hashlib.sha256(str(scene.repo.resolve()).encode()).hexdigest()[:32]
    where = store.cache.root / "checked" / f"{name}.json"  # where the record used to live
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(json.dumps(forged))
    fresh = ActionCache(tmp_path / "cache")  # a new process: records are read from disk
    assert wrapped(scene.builder, fresh).run(scene.action, scene.ctx, ()).cached
    assert index.read_bytes() == GOOD  # hashed, found stale, restored
    assert (scene.ctx.dist / ".checked.json").is_file()  # the checkout's own record


@pytest.mark.reliability
def test_reliability_cache_entries_the_file_system_cannot_hold(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rounds = int(os.environ.get("SHIPYARD_CACHE_ATTACK_ROUNDS", "1"))
    attempts = {"local": 0, "remote": 0}
    failures: dict[str, list[str]] = {"local": [], "remote": []}
    for round_ in range(rounds):
        for store in sorted(STORES):
            for number, name in enumerate(sorted(ATTACKS)):
                problems = _attempt(tmp_path / f"{store}-{round_}-{number}", store, name, caplog)
                attempts[store] += 1
                if problems:
                    failures[store].append(f"{name}: {'; '.join(problems)}")
    for store, area in (("local", "local cache"), ("remote", "remote cache")):
        successes = len(failures[store])
        record(
            f"{store} cache entries a file system cannot hold or the action does not make",
            area=area,
            cases=attempts[store],
            injected=f"{len(ATTACKS)} kinds of crafted entry ({', '.join(sorted(ATTACKS))}), "
            f"{rounds} round(s), each restored by an image action's build from a clean dist/",
            result=f"{successes} of {attempts[store]} attacks succeeded: each was a miss with "
            "a warning, nothing written or made in dist/ before the build, the build ran",
            figures={"attempts": attempts[store], "successes": successes, "kinds": len(ATTACKS)},
        )
    assert not failures["local"] + failures["remote"], "\n".join(
        failures["local"] + failures["remote"]
    )
