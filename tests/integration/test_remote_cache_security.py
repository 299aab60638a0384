"""Issue 12, item 4: the remote cache wrote anywhere in the checkout.

Anyone who can push to the `--cache=oci://` repository could tag a crafted cache
manifest under an action key; every machine restoring it then wrote files under
any relative path (.git/hooks/pre-commit, Makefile) with any mode (6777). Here an
honest build fills a cache repository, its manifests are replaced by crafted ones
(pushed to the real registry, or served by a hostile proxy for bytes that do not
match their digest), and `shipyard build` runs on a clean clone: each crafted
entry must be a miss with a warning, nothing may be written outside the action's
declared outputs, modes stay 644/755, and the outputs equal an honest build's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import stat
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from shipyard.engine.cache.remote import ARTIFACT_TYPE, RemoteCache
from shipyard.oci.remote.registry import MEDIA_OCI_MANIFEST, Registry
from tests.integration._repo import clone, shipyard
from tests.integration.conftest import REPO, Services
from tests.integration.faultproxy import running_proxy
from tests.reliability import record

pytestmark = [pytest.mark.integration, pytest.mark.requires("registry")]

RUN = uuid.uuid4().hex[:8]  # the shared registry outlives a run: one prefix per run
MANIFEST = """\
schema: 1
project: {name: tiny, version: git, python: "3.11"}
defaults:
  outputs: [wheel, zipapp]
  platforms: [linux/amd64]
binaries:
  echo: {source: echo, entrypoint: "meshecho.main:main"}
"""
EVIL = b"#!/bin/sh\necho owned > /tmp/owned-by-the-cache\n"
HOOK = b"#!/bin/sh\necho the checkout's own hook\n"
EMPTY = b"{}"
_TITLE = "org.opencontainers.image.title"
_MODE = "dev.shipyard.mode"
_FIXED_DATES = {
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}


def _git(target: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(target), "-c", "user.email=t@t.invalid", "-c", "user.name=t", *args],
        check=True,
        capture_output=True,
        env={**os.environ, **_FIXED_DATES},
    )


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tree(root: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple[str, int]]:
    """Every file and link under `root` (but the `skip` prefixes): digest or target, mode."""
    seen: dict[str, tuple[str, int]] = {}
    if not root.exists():
        return seen
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if any(rel == s or rel.startswith(s + "/") for s in skip):
            continue
        facts = path.lstat()
        if stat.S_ISLNK(facts.st_mode):
            seen[rel] = ("-> " + os.readlink(path), facts.st_mode)
        elif stat.S_ISREG(facts.st_mode):
            seen[rel] = (_sha(path.read_bytes()), facts.st_mode)
    return seen


def _outputs(dist: Path) -> dict[str, str]:
    return {
        str(p.relative_to(dist)): _sha(p.read_bytes())
        for kind in ("wheels", "zipapps")
        for p in sorted((dist / kind).glob("*"))
    }


class Pusher:
    """Writes to a registry repository as any client with push rights could (plain HTTP)."""

    def __init__(self, host: str) -> None:
        self.base = f"http://{host}"
        self.session = requests.Session()
        self.session.trust_env = False  # loopback only, never through a proxy

    def blob(self, repo: str, data: bytes) -> str:
        digest = f"sha256:{_sha(data)}"
        started = self.session.post(f"{self.base}/v2/{repo}/blobs/uploads/", timeout=30)
        assert started.status_code == 202, started.text
        location = started.headers["Location"]
        url = location if location.startswith("http") else self.base + location
        done = self.session.put(url, params={"digest": digest}, data=data, timeout=30)
        assert done.status_code == 201, done.text
        return digest

    def manifest(self, repo: str, tag: str) -> dict[str, object]:
        got = self.session.get(
            f"{self.base}/v2/{repo}/manifests/{tag}",
            headers={"Accept": MEDIA_OCI_MANIFEST},
            timeout=30,
        )
        assert got.status_code == 200, got.text
        manifest: dict[str, object] = got.json()
        return manifest

    def tag(self, repo: str, tag: str, layers: list[dict[str, object]]) -> None:
        """Tag a cache manifest with `layers` (as RemoteCache.store writes them) as `tag`."""
        manifest = {
            "schemaVersion": 2,
            "mediaType": MEDIA_OCI_MANIFEST,
            "artifactType": ARTIFACT_TYPE,
            "config": {
                "mediaType": "application/vnd.oci.empty.v1+json",
                "digest": self.blob(repo, EMPTY),
                "size": len(EMPTY),
            },
            "layers": layers,
        }
        put = self.session.put(
            f"{self.base}/v2/{repo}/manifests/{tag}",
            data=json.dumps(manifest).encode(),
            headers={"Content-Type": MEDIA_OCI_MANIFEST},
            timeout=30,
        )
        assert put.status_code == 201, put.text

    def layer(self, repo: str, title: str, data: bytes, mode: str = "644") -> dict[str, object]:
        return {
            "mediaType": "application/octet-stream",
            "digest": self.blob(repo, data),
            "size": len(data),
            "annotations": {_TITLE: title, _MODE: mode},
        }


@dataclass(frozen=True)
class Honest:
    """The tiny project, an honest build's outputs, and its cache entries by kind."""

    origin: Path
    good: dict[str, str]  # dist-relative output -> sha256
    entries: dict[str, tuple[str, dict[str, object]]]  # kind -> (key, honest layer)


@pytest.fixture(scope="module")
def honest(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Honest:
    """Build the tiny project once into a cache repository; learn its keys and layers."""
    origin = tmp_path_factory.mktemp("cache-security") / "origin"
    shutil.copytree(REPO / "examples" / "mesh" / "echo", origin / "echo")
    (origin / "binaries.yaml").write_text(MANIFEST)
    (origin / ".gitignore").write_text("/dist/\n")
    _git(origin, "init", "-q")
    _git(origin, "add", "-A")
    _git(origin, "commit", "-qm", "tiny")
    root = clone(origin, origin.parent / "honest")
    repo = f"cache-security-{RUN}/honest"
    cache = origin.parent / "honest-cache"
    done = shipyard(
        root, "build", f"--cache-dir={cache}", f"--cache=oci://{services.registry}/{repo}"
    )
    assert done.returncode == 0, done.stderr
    pusher = Pusher(services.registry)
    entries: dict[str, tuple[str, dict[str, object]]] = {}
    for entry in (cache / "v1" / "actions").glob("*.json"):
        key = entry.stem
        layers = pusher.manifest(repo, key)["layers"]
        assert isinstance(layers, list) and len(layers) == 1, layers
        title = layers[0]["annotations"][_TITLE]
        entries["wheel" if title.startswith("dist/wheels/") else "zipapp"] = (key, layers[0])
    assert set(entries) == {"wheel", "zipapp"}, entries
    return Honest(origin, _outputs(root / "dist"), entries)


@dataclass(frozen=True)
class Attack:
    """A crafted manifest for one action: extra layers beside (or instead of) the honest one."""

    name: str
    kind: str  # the action whose key is poisoned
    title: str  # where the crafted layer says to write
    mode: str = "644"
    honest_bytes: bool = False  # the crafted layer carries the honest output's bytes
    mismatch: bool = False  # the registry serves other bytes for the honest digest


# "{outside}" in a title is a folder beside the clean checkout, outside it.
ATTACKS = [
    Attack("../../.git/hooks/pre-commit", "wheel", "../../.git/hooks/pre-commit", "755"),
    Attack(".git/hooks/pre-commit", "zipapp", ".git/hooks/pre-commit", "755"),
    Attack("Makefile", "wheel", "Makefile"),
    Attack("dist/../Makefile", "zipapp", "dist/../Makefile"),
    Attack("dist/../x", "wheel", "dist/../x"),
    Attack("absolute path", "zipapp", "{outside}/dropped"),
    Attack("zipapp at mode 6777", "zipapp", "", "6777", honest_bytes=True),
    Attack("wheel at mode 4755", "wheel", "", "4755", honest_bytes=True),
    Attack("wheel blob with other bytes", "wheel", "", mismatch=True),
    Attack("zipapp blob with other bytes", "zipapp", "", "755", mismatch=True),
]


def _poison(pusher: Pusher, repo: str, honest: Honest, attack: Attack, outside: Path) -> str | None:
    """Tag the crafted manifest for `attack` in `repo`; the digest to tamper with, if any."""
    key, layer = honest.entries[attack.kind]
    annotations = layer["annotations"]
    assert isinstance(annotations, dict)
    title = attack.title.format(outside=outside) or str(annotations[_TITLE])
    digest = str(layer["digest"])
    # The honest output's blob, so that the honest layer can be restored at all.
    good = next(v for k, v in honest.good.items() if f"dist/{k}" == annotations[_TITLE])
    source = honest.origin.parent / "honest" / str(annotations[_TITLE])
    data = source.read_bytes()
    assert _sha(data) == good
    pusher.blob(repo, data)
    if attack.mismatch:
        pusher.tag(repo, key, [layer])
        return digest
    crafted = pusher.layer(repo, title, data if attack.honest_bytes else EVIL, attack.mode)
    pusher.tag(repo, key, [layer, crafted] if not attack.honest_bytes else [crafted])
    return None


@dataclass
class Round:
    """One poisoned build: which attacks, and what was seen."""

    attacks: list[Attack]
    problems: list[str]


def _statuses(root: Path) -> dict[str, str]:
    report = json.loads((root / "dist" / "report.json").read_text())
    return {a["id"]: a["status"] for a in report["actions"]}


def _blob_get(digest: str) -> Callable[[str, str], bool]:
    """Matches the GET of the blob `digest` (the hostile registry answers it with other bytes)."""
    return lambda method, path: method == "GET" and path.endswith(digest)


def _poisoned_build(
    services: Services, honest: Honest, tmp: Path, attacks: list[Attack]
) -> list[str]:
    """Poison one action key per attack, build a clean clone from the cache; problems seen."""
    assert len({a.kind for a in attacks}) == len(attacks), "one attack per action"
    repo = f"cache-security-{RUN}/{tmp.name}"
    pusher = Pusher(services.registry)
    outside = tmp / "outside"
    tampered = [d for a in attacks if (d := _poison(pusher, repo, honest, a, outside))]
    root = clone(honest.origin, tmp / "repo")
    (root / ".git" / "hooks" / "pre-commit").write_bytes(HOOK)
    (root / "Makefile").write_text("all:\n\ttrue\n")
    outside.mkdir(exist_ok=True)
    before = _tree(tmp, skip=("repo/dist", "repo/.git/index", "cache"))
    cache = tmp / "cache"

    def build(host: str) -> subprocess.CompletedProcess[str]:
        return shipyard(root, "build", f"--cache-dir={cache}", f"--cache=oci://{host}/{repo}")

    if tampered:
        with running_proxy(services.registry, rate=0.0) as proxy:
            for digest in tampered:
                sizes = [v["size"] for _, v in honest.entries.values() if v["digest"] == digest]
                size = sizes[0]
                assert isinstance(size, int)
                proxy.force(200, body=EVIL[:size].ljust(size, b"#"), match=_blob_get(digest))
            done = build(proxy.host)
    else:
        done = build(services.registry)
    problems: list[str] = []
    if done.returncode != 0:
        return [f"the build failed ({done.returncode}): {done.stderr[-2000:]}"]
    after = _tree(tmp, skip=("repo/dist", "repo/.git/index", "cache"))
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if changed:
        problems.append(f"written outside the declared outputs: {changed}")
    for path in (root / "dist").rglob("*"):
        facts = path.lstat()
        if stat.S_ISREG(facts.st_mode) and stat.S_IMODE(facts.st_mode) not in (0o644, 0o755):
            problems.append(f"{path.relative_to(root)} has mode {stat.S_IMODE(facts.st_mode):o}")
    if _outputs(root / "dist") != honest.good:
        problems.append(f"outputs {_outputs(root / 'dist')} differ from {honest.good}")
    statuses = _statuses(root)
    for attack in attacks:
        status = statuses.get(f"{attack.kind}:echo")
        if status != "built":
            problems.append(f"{attack.name}: {attack.kind}:echo was {status}, not rebuilt")
    warnings = [line for line in done.stderr.splitlines() if "remote cache entry" in line]
    if len(warnings) < len(attacks):
        problems.append(f"{len(warnings)} warnings for {len(attacks)} crafted entries")
    return [f"[{', '.join(a.name for a in attacks)}] {p}" for p in problems]


def _rounds() -> Iterator[list[Attack]]:
    """The attacks two at a time: one on the wheel's key, one on the zipapp's."""
    wheel = [a for a in ATTACKS if a.kind == "wheel"]
    zipapp = [a for a in ATTACKS if a.kind == "zipapp"]
    for number in range(max(len(wheel), len(zipapp))):
        yield [*wheel[number : number + 1], *zipapp[number : number + 1]]


@pytest.mark.reliability
def test_crafted_remote_cache_entries_are_misses_that_write_nothing(
    services: Services, honest: Honest, tmp_path: Path
) -> None:
    rounds = int(os.environ.get("SHIPYARD_CACHE_ATTACK_ROUNDS", "1"))
    attempts = successes = builds = 0
    problems: list[str] = []
    for repeat in range(rounds):
        for number, attacks in enumerate(_rounds()):
            seen = _poisoned_build(services, honest, tmp_path / f"r{repeat}-{number}", attacks)
            builds += 1
            attempts += len(attacks)
            successes += len(attacks) if seen else 0  # a problem counts against each attack
            problems += seen
    kinds = [a.name for a in ATTACKS]
    record(
        "crafted remote cache manifests restored by a clean checkout",
        area="remote cache",
        cases=attempts,
        injected=f"{len(kinds)} crafted cache manifests pushed under real action keys "
        f"({', '.join(kinds)}), {rounds} round(s), restored by `shipyard build "
        "--cache=oci://` on a clean clone; blobs with other bytes served by a hostile proxy",
        result=f"{successes} of {attempts} attacks succeeded in {builds} builds: each a miss "
        "with a warning, nothing written outside dist/, modes 644/755, outputs "
        "byte-identical to an honest build's",
        figures={"attempts": attempts, "successes": successes, "builds": builds},
    )
    assert not problems, "\n".join(problems)


def test_restore_does_not_write_through_a_link_planted_in_dist(
    services: Services, honest: Honest, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repo = f"cache-security-{RUN}/link"
    pusher = Pusher(services.registry)
    key, layer = honest.entries["zipapp"]
    annotations = layer["annotations"]
    assert isinstance(annotations, dict)
    data = (honest.origin.parent / "honest" / str(annotations[_TITLE])).read_bytes()
    pusher.blob(repo, data)
    pusher.tag(repo, key, [layer])
    checkout = tmp_path / "checkout"
    outside = tmp_path / "outside"
    outside.mkdir()
    (checkout / "dist").mkdir(parents=True)
    (checkout / "dist" / "zipapps").symlink_to(outside)  # dist/zipapps -> outside/
    cache = RemoteCache(
        Registry(services.registry, environ={"DOCKER_CONFIG": "/nonexistent"}), repo
    )
    with caplog.at_level(logging.WARNING, logger="shipyard"):
        assert cache.restore(key, checkout) is None
    assert list(outside.iterdir()) == []
    assert any("symbolic link" in r.getMessage() for r in caplog.records)
    (checkout / "dist" / "zipapps").unlink()
    restored = cache.restore(key, checkout)  # the same entry, honest and with no link: a hit
    assert restored is not None and [a.sha256 for a in restored] == [_sha(data)]
    assert stat.S_IMODE((checkout / str(annotations[_TITLE])).stat().st_mode) == 0o755
