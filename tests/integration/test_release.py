"""Whole releases of a two-binary example to two loopback registries and a pypiserver.

The full release uses shipyard's real builders (wheels, zipapps, images from the
base layout) and smoke-runs zipapps and host-platform images. The tests that
exercise preflight and publish (twenty killed publishes among them) use a
stand-in image builder that writes small valid two-platform OCI layouts,
deterministic per binary and version, so each trial does not rebuild images.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from shipyard._fs import sha256_file
from shipyard.builders import BUILDERS as REAL_BUILDERS
from shipyard.builders.wheel import WheelBuilder
from shipyard.engine.plan import Action
from shipyard.engine.scheduler import Artifact, BuildContext, Builder, Outcome
from shipyard.errors import BuildError, UsageError
from shipyard.oci.remote.auth import Credentials
from shipyard.oci.remote.push import Publisher
from shipyard.oci.remote.registry import Registry, RegistryError
from shipyard.release import (
    PackageIndexError,
    ReleaseContext,
    ReleaseOptions,
    prepare_release,
    release,
)
from shipyard.release.pipeline import PIPELINE, run_pipeline
from shipyard.release.publish import PublishError
from tests.integration.conftest import Services
from tests.integration.faultproxy import FaultProxy, running_proxy
from tests.integration.pypi import package_index
from tests.integration.registries import (
    PASSWORD,
    USER,
    ExtraRegistry,
    TokenIssuer,
    running_registry,
    running_token_server,
    write_htpasswd,
)
from tests.integration.test_push import make_layout, skopeo_raw
from tests.reliability import record

pytestmark = [pytest.mark.integration, pytest.mark.requires("registry", "skopeo")]

REPO = Path(__file__).resolve().parents[2]
INDEX_USER, INDEX_PASSWORD = "uploader", "index-secret-7"
PLATFORMS = ("linux/amd64", "linux/arm64")
# The shared registry outlives a test run: every run pushes under its own prefix.
RUN = uuid.uuid4().hex[:8]
# pypiserver imports passlib, which breaks on bcrypt>=4.1 (installed for the registry
# tests); without bcrypt it falls back to the {SHA} htpasswd scheme used here.


class LayoutImageBuilder:
    """Stand-in for the image builder: a two-platform layout in dist/images/<binary>/."""

    kind = "image"

    def key(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> str:
        return f"{action.id}@{ctx.stamp.version}"

    def build(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Outcome:
        layout = ctx.dist / "images" / action.binaries[0]
        shutil.rmtree(layout, ignore_errors=True)
        make_layout(layout, action.platforms, f"{action.id}@{ctx.stamp.version}")
        index = layout / "index.json"
        artifact = Artifact(index, sha256_file(index), index.stat().st_size)
        return Outcome(self.key(action, ctx, deps), (artifact,))


BUILDERS: dict[str, Builder] = {"wheel": WheelBuilder(), "image": LayoutImageBuilder()}

MANIFEST = """\
schema: 1
project: {name: mesh, version: git, python: "3.11"}
defaults:
  outputs: [wheel, image]
  platforms: [linux/amd64, linux/arm64]
  image:
    hubs: ["${HUB_A}", "${HUB_B}"]
    tags: [latest]
binaries:
  meshctl: {source: ctl, entrypoint: "meshctl.cli:main"}
  mesh-agent: {source: agent, entrypoint: "meshagent.main:main"}
"""


# The real thing: wheels, zipapps and images, smoke-run in validate.
REAL_MANIFEST = """\
schema: 1
project: {name: mesh, version: git, python: "3.11"}
defaults:
  outputs: [wheel, zipapp, image]
  platforms: [linux/amd64, linux/arm64]
  smoke: [--version]
  image:
    base: "oci-layout:${BASE_LAYOUT}"
    hubs: ["${HUB_A}", "${HUB_B}"]
    tags: [latest]
binaries:
  meshctl: {source: ctl, entrypoint: "meshctl.cli:main"}
  mesh-agent: {source: agent, entrypoint: "meshagent.main:main"}
"""


@dataclass(frozen=True)
class PackageServer:
    """A running pypiserver: upload URL and where its packages land."""

    url: str
    packages: Path


@dataclass(frozen=True)
class Hubs:
    """The two registries: the shared one and one that requires basic auth."""

    open: str
    basic: ExtraRegistry


@pytest.fixture(scope="module")
def pypiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PackageServer]:
    folder = tmp_path_factory.mktemp("pypiserver")
    with package_index(folder, INDEX_USER, INDEX_PASSWORD) as url:
        yield PackageServer(url, folder / "packages")


@pytest.fixture(scope="module")
def hubs(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hubs]:
    folder = tmp_path_factory.mktemp("release-registry")
    write_htpasswd(folder / "htpasswd", USER, PASSWORD)
    with running_registry(folder / "registry", htpasswd=folder / "htpasswd") as basic:
        yield Hubs(services.registry, basic)


def make_repo(target: Path, manifest: str = MANIFEST) -> Path:
    """A git repository with the meshctl and mesh-agent examples and the manifest."""
    for name in ("ctl", "agent"):
        shutil.copytree(REPO / "examples" / "mesh" / name, target / name)
    (target / "binaries.yaml").write_text(manifest)
    (target / ".gitignore").write_text("/dist/\n")
    git = ["git", "-C", str(target), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "mesh: first"], check=True)
    (target / "ctl" / "NOTES.txt").write_text("second\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "ctl: notes"], check=True)
    return target


def release_env(hubs: Hubs, index: PackageServer, prefix: str) -> dict[str, str]:
    """The environment a release runs in: hubs, registry and index credentials."""
    user_var = "SHIPYARD_REGISTRY_" + hubs.basic.host.replace(".", "_").replace(":", "_")
    return {
        **os.environ,
        "HUB_A": f"{hubs.open}/{prefix}",
        "HUB_B": f"{hubs.basic.host}/{prefix}",
        f"{user_var}_USER": USER,
        f"{user_var}_PASSWORD": PASSWORD,
        "SHIPYARD_INDEX_URL": index.url,
        "SHIPYARD_INDEX_USER": INDEX_USER,
        "SHIPYARD_INDEX_PASSWORD": INDEX_PASSWORD,
    }


def context(
    repo: Path,
    env: Mapping[str, str],
    options: ReleaseOptions,
    lines: list[str] | None = None,
    builders: Mapping[str, Builder] = BUILDERS,
) -> ReleaseContext:
    """A release context for `repo`, by default with the stand-in image builder."""
    return prepare_release(
        repo / "binaries.yaml",
        options,
        env=env,
        builders=builders,
        on_step=(lines.append if lines is not None else lambda _: None),
    )


def tag_digests(hubs: Hubs, prefix: str, tags: tuple[str, ...]) -> dict[str, str | None]:
    """image:tag -> digest (None when absent) on both hubs."""
    found: dict[str, str | None] = {}
    for host, creds in ((hubs.open, None), (hubs.basic.host, Credentials(USER, PASSWORD))):
        client = Registry(host, credentials=creds)
        for binary in ("meshctl", "mesh-agent"):
            for tag in tags:
                found[f"{host}/{prefix}/{binary}:{tag}"] = client.manifest_exists(
                    f"{prefix}/{binary}", tag
                )
    return found


def index_files(index: PackageServer) -> set[str]:
    """The files the package index holds."""
    return {p.name for p in index.packages.iterdir()}


@pytest.mark.requires("registry", "skopeo", "base-layout", "docker")
def test_release_publishes_everything_and_verifies(
    services: Services, hubs: Hubs, pypiserver: PackageServer, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", REAL_MANIFEST)
    env = release_env(hubs, pypiserver, f"rel-full-{RUN}")
    env["BASE_LAYOUT"] = str(services.base_layout)
    lines: list[str] = []
    ctx = context(repo, env, ReleaseOptions(version="1.0.0"), lines, REAL_BUILDERS)
    seen: list[str] = []
    problems: list[str] = []
    stop = threading.Event()
    watcher = Registry(hubs.open)

    def poll() -> None:  # a tag must never name an index with a platform missing
        while not stop.is_set():
            data = None
            if watcher.manifest_exists(f"rel-full-{RUN}/meshctl", "1.0.0") is not None:
                data, _, digest = watcher.get_manifest(f"rel-full-{RUN}/meshctl", "1.0.0")
                seen.append(digest)
            if data is None:
                continue
            entries = json.loads(data)["manifests"]
            if len(entries) != len(PLATFORMS):
                problems.append(f"{len(entries)} platforms")
            for entry in entries:
                if watcher.manifest_exists(f"rel-full-{RUN}/meshctl", entry["digest"]) is None:
                    problems.append(f"{entry['digest']} missing")

    thread = threading.Thread(target=poll)
    thread.start()
    try:
        release(ctx)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert [(r.name, r.status) for r in ctx.results] == [
        ("preflight", "ran"),
        ("build", "ran"),
        ("validate", "ran"),
        ("stage", "ran"),
        ("publish", "ran"),
        ("verify", "ran"),
    ]
    folder = repo / "dist" / "release" / "1.0.0"
    staged = json.loads((folder / "release.json").read_text())
    assert staged["revision"] == ctx.stamp.revision
    images = {a["binary"]: a for a in staged["artifacts"] if a["kind"] == "image"}
    assert sorted(images) == ["mesh-agent", "meshctl"]
    assert problems == []
    assert set(seen) <= {images["meshctl"]["digest"]}
    # Validate smoke-ran every zipapp that runs here and each host-platform image.
    smoked = [line for line in lines if line.startswith(("smoke ", "image smoke "))]
    assert any(x.startswith("smoke meshctl-1.0.0") and "1.0.0" in x for x in smoked), lines
    assert any(x.startswith("smoke mesh-agent-1.0.0-linux_amd64.pyz") for x in smoked), lines
    for binary in ("meshctl", "mesh-agent"):
        assert any(
            x.startswith(f"image smoke {binary} (linux/amd64)") and "1.0.0" in x for x in smoked
        ), lines
    zipapps = sorted(Path(a["path"]).name for a in staged["artifacts"] if a["kind"] == "zipapp")
    assert zipapps == [
        "mesh-agent-1.0.0-linux_amd64.pyz",
        "mesh-agent-1.0.0-linux_arm64.pyz",
        "meshctl-1.0.0.pyz",
    ]
    for art in images.values():  # the image builder names arm64's variant, as docker does
        assert sorted(art["platform"]) == ["linux/amd64", "linux/arm64/v8"]
        assert [m["platform"] for m in art["manifests"]] == art["platform"]
    # skopeo, an independent client, sees every tag on both hubs.
    for binary, art in images.items():
        for hub, creds in ((hubs.open, None), (hubs.basic.host, f"{USER}:{PASSWORD}")):
            for tag in ("1.0.0", "latest"):
                raw = skopeo_raw(f"{hub}/rel-full-{RUN}/{binary}:{tag}", creds)
                assert "sha256:" + hashlib.sha256(raw).hexdigest() == art["digest"]
    # SHA256SUMS checks out with sha256sum from the folder.
    check = subprocess.run(
        ["sha256sum", "--strict", "-c", "SHA256SUMS"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "release.json: OK" in check.stdout
    # The SBOMs are valid CycloneDX; mesh-agent's lists PyYAML.
    validator = JsonStrictValidator(SchemaVersion.V1_6)
    for binary in ("meshctl", "mesh-agent"):
        text = (folder / "sbom" / f"{binary}.cdx.json").read_text()
        assert validator.validate_str(text) is None
    agent = json.loads((folder / "sbom" / "mesh-agent.cdx.json").read_text())
    assert [c["name"].lower() for c in agent["components"]] == ["pyyaml"]
    assert "ctl: notes" in (folder / "CHANGELOG.md").read_text()
    # pip installs the wheels from the index.
    wheels = sorted(a["path"] for a in staged["artifacts"] if a["kind"] == "wheel")
    assert len(wheels) == 2
    target = tmp_path / "installed"
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target)]
    pip += ["--index-url", pypiserver.url + "simple/", "--no-cache-dir", "meshctl==1.0.0"]
    done = subprocess.run(
        pip,
        check=False,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "PIP_FIND_LINKS": "",
            "PIP_EXTRA_INDEX_URL": "",
            "PIP_CONFIG_FILE": os.devnull,
        },
    )
    assert done.returncode == 0, done.stderr
    assert any(p.name.startswith("meshctl-1.0.0") for p in target.iterdir())
    # Released: a second run stops in preflight, before building anything.
    with pytest.raises(UsageError, match="already released"):
        release(context(repo, env, ReleaseOptions(version="1.0.0")))


def _no_wheels(repo: Path) -> bool:
    return not list((repo / "dist").rglob("*.whl"))


@pytest.mark.parametrize(
    "problem", ["registry-password", "index-password", "dirty", "pep440", "tagged"]
)
def test_preflight_fails_before_anything_is_built(
    hubs: Hubs, pypiserver: PackageServer, tmp_path: Path, problem: str
) -> None:
    repo = make_repo(tmp_path / "repo")
    env = release_env(hubs, pypiserver, f"rel-pre-{problem}-{RUN}")
    version = "2.0.0"
    if problem == "registry-password":
        user_var = next(k for k in env if k.endswith("_PASSWORD") and "REGISTRY" in k)
        env[user_var] = "wrong"
    elif problem == "index-password":
        env["SHIPYARD_INDEX_PASSWORD"] = "wrong"
    elif problem == "dirty":
        (repo / "ctl" / "NOTES.txt").write_text("changed\n")
    elif problem == "pep440":
        version = "2.0.0-banana!"
    else:
        subprocess.run(["git", "-C", str(repo), "tag", "v2.0.0"], check=True)
    ctx = context(repo, env, ReleaseOptions(version=version))
    with pytest.raises(UsageError) as caught:
        release(ctx)
    assert caught.value.exit_code == 2
    assert [(r.name, r.status) for r in ctx.results][:2] == [
        ("preflight", "failed"),
        ("build", "skipped"),
    ]
    assert _no_wheels(repo)
    assert not (repo / "dist" / "release").exists()


def test_snapshot_and_dry_run_publish_nothing(
    hubs: Hubs, pypiserver: PackageServer, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    env = release_env(hubs, pypiserver, f"rel-nothing-{RUN}")
    before_index = index_files(pypiserver)
    before_tags = tag_digests(hubs, f"rel-nothing-{RUN}", ("3.0.0", "latest"))
    assert set(before_tags.values()) == {None}
    snap = context(repo, env, ReleaseOptions(version="3.0.0", snapshot=True))
    release(snap)
    assert ".dev" in snap.stamp.version
    assert [r.status for r in snap.results] == ["ran"] * 4 + ["skipped"] * 2
    assert (repo / "dist" / "release" / snap.stamp.version / "release.json").is_file()
    lines: list[str] = []
    dry = context(repo, env, ReleaseOptions(version="3.0.0", dry_run=True), lines)
    release(dry)
    assert sum(line.startswith("would push image") for line in lines) == 4  # 2 images x 2 hubs
    assert sum(line.startswith("would upload wheel") for line in lines) == 2
    assert tag_digests(hubs, f"rel-nothing-{RUN}", ("3.0.0", "latest")) == before_tags
    assert index_files(pypiserver) == before_index
    assert not (repo / "dist" / "release" / "3.0.0").exists()


RUNNER = """
import json, sys
from pathlib import Path
from shipyard.release import ReleaseOptions, prepare_release, release
from tests.integration.test_release import BUILDERS
ctx = prepare_release(
    Path(sys.argv[1]) / "binaries.yaml", ReleaseOptions(version=sys.argv[2]),
    builders=BUILDERS, on_step=lambda line: print(line, flush=True),
)
release(ctx)
"""


@pytest.mark.reliability
def test_killed_publish_resumes_without_uploading_twice(
    hubs: Hubs, pypiserver: PackageServer, tmp_path: Path
) -> None:
    import random

    repo = make_repo(tmp_path / "repo")
    env = release_env(hubs, pypiserver, f"rel-kill-{RUN}")
    rng = random.Random(1234)
    killed = 0
    trials = 20
    resumed_steps = 0
    for trial in range(trials):
        version = f"4.0.{trial}"
        journal = repo / "dist" / "release" / version / "publish.journal"
        process = subprocess.Popen(
            [sys.executable, "-c", RUNNER, str(repo), version],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        deadline = time.monotonic() + 120
        while not journal.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.6))
        if process.poll() is None:
            process.kill()
            killed += 1
        first = process.communicate()[0].splitlines()
        lines: list[str] = []
        ctx = context(repo, env, ReleaseOptions(version=version), lines)
        release(ctx)
        uploads = [
            line
            for line in first + lines
            if line.startswith(("pushed blob", "pushed manifest", "uploaded wheel", "tagged"))
        ]
        assert len(uploads) == len(set(uploads)), f"trial {trial}: uploaded twice: {uploads}"
        resumed_steps += sum(line.startswith("journalled ") for line in lines)
        staged = json.loads((journal.parent / "release.json").read_text())
        for art in staged["artifacts"]:
            if art["kind"] == "image":
                digests = tag_digests(hubs, f"rel-kill-{RUN}", (art["tags"][0],))
                mine = {k: v for k, v in digests.items() if f"/{art['binary']}:" in k}
                assert set(mine.values()) == {art["digest"]}, f"trial {trial}: {mine}"
            if art["kind"] == "wheel":
                served = pypiserver.packages / Path(art["path"]).name
                assert sha256_file(served) == art["sha256"]
    assert killed >= trials // 2, "too few runs were killed mid-way to test resuming"
    record(
        "release publish killed and re-run",
        area="crash",
        cases=trials,
        injected="SIGKILL at a random moment of publish (0-0.6 s after the journal appears)",
        result=(
            f"{killed} of {trials} runs killed mid-publish; every re-run finished, no upload "
            f"twice, {resumed_steps} journalled steps skipped, tags and index match release.json"
        ),
        figures={"killed": killed, "journalled_steps_skipped": resumed_steps},
    )


@pytest.mark.requires("registry", "base-layout")
def test_a_failing_smoke_run_stops_the_release_in_validate(
    services: Services, hubs: Hubs, pypiserver: PackageServer, tmp_path: Path
) -> None:
    manifest = REAL_MANIFEST.replace("[wheel, zipapp, image]", "[wheel, zipapp]")
    manifest = manifest.replace("smoke: [--version]", "smoke: [--no-such-flag]")
    repo = make_repo(tmp_path / "repo", manifest)
    env = release_env(hubs, pypiserver, f"rel-smoke-{RUN}")
    env["BASE_LAYOUT"] = str(services.base_layout)
    before = index_files(pypiserver)
    ctx = context(repo, env, ReleaseOptions(version="5.0.0"), builders=REAL_BUILDERS)
    with pytest.raises(BuildError, match=r"smoke meshctl|smoke mesh-agent") as caught:
        release(ctx)
    assert "--no-such-flag" in " ".join(caught.value.command or ())
    assert [(r.name, r.status) for r in ctx.results] == [
        ("preflight", "ran"),
        ("build", "ran"),
        ("validate", "failed"),
        ("stage", "skipped"),
        ("publish", "skipped"),
        ("verify", "skipped"),
    ]
    assert not (repo / "dist" / "release" / "5.0.0").exists()
    assert index_files(pypiserver) == before


@pytest.mark.parametrize("kind", ["image", "wheel"])
def test_an_existing_different_artifact_is_a_clear_error(
    hubs: Hubs, pypiserver: PackageServer, tmp_path: Path, kind: str
) -> None:
    repo = make_repo(tmp_path / "repo")
    prefix = f"rel-differ-{kind}-{RUN}"
    env = release_env(hubs, pypiserver, prefix)
    version = "6.0.0" if kind == "image" else "6.0.1"
    ctx = context(repo, env, ReleaseOptions(version=version))
    run_pipeline(ctx, PIPELINE[:4])  # preflight, build, validate, stage
    folder = repo / "dist" / "release" / version
    staged = json.loads((folder / "release.json").read_text())
    if kind == "image":  # someone else pushes the version tag between preflight and publish
        other = tmp_path / "other"
        theirs = make_layout(other, PLATFORMS, f"someone else's {version}")
        Publisher(Registry).push("meshctl", other, [f"{hubs.open}/{prefix}"], [version])
        expected = rf"meshctl:{version} already exists with {theirs}"
    else:  # the index already holds another file under the wheel's name
        wheel = next(Path(a["path"]).name for a in staged["artifacts"] if a["kind"] == "wheel")
        changed = tmp_path / "changed" / wheel
        changed.parent.mkdir()
        changed.write_bytes((folder / "wheels" / wheel).read_bytes())
        with zipfile.ZipFile(changed, "a") as archive:
            archive.comment = b"a different build"
        assert ctx.index is not None
        ctx.index.upload(changed)
        expected = rf"already has {re.escape(wheel)} with sha256 {sha256_file(changed)}"
    with pytest.raises(PublishError, match=expected) as caught:
        run_pipeline(ctx, PIPELINE[4:])
    assert "release a new version" in str(caught.value) or "released differently" in str(
        caught.value
    )
    # Nothing staged is lost; the other artifact is untouched.
    assert json.loads((folder / "release.json").read_text()) == staged
    check = subprocess.run(
        ["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=folder, capture_output=True, check=False
    )
    assert check.returncode == 0
    if kind == "image":
        assert Registry(hubs.open).manifest_exists(f"{prefix}/meshctl", version) == theirs
    else:
        assert sha256_file(pypiserver.packages / wheel) == sha256_file(changed)


def test_wheels_built_only_for_images_are_not_released(
    hubs: Hubs, pypiserver: PackageServer, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", MANIFEST.replace("[wheel, image]", "[image]"))
    env = release_env(hubs, pypiserver, f"rel-imgonly-{RUN}")
    for name in ("SHIPYARD_INDEX_URL", "SHIPYARD_INDEX_USER", "SHIPYARD_INDEX_PASSWORD"):
        env.pop(name)
    lines: list[str] = []
    ctx = context(repo, env, ReleaseOptions(version="7.0.0", dry_run=True), lines)
    release(ctx)  # no package index is needed: no wheel is a declared output
    assert list((repo / "dist" / "wheels").glob("*.whl"))  # built, as the images' input
    staged = json.loads((ctx.release_dir / "release.json").read_text())
    assert {a["kind"] for a in staged["artifacts"]} == {"image", "sbom"}
    assert sum(line.startswith("would push image") for line in lines) == 4
    assert not any("wheel" in line for line in lines if line.startswith("would"))


def test_a_hub_that_only_allows_pull_fails_preflight(
    hubs: Hubs, pypiserver: PackageServer, tmp_path: Path
) -> None:
    issuer = TokenIssuer(tmp_path, USER, PASSWORD)
    issuer.allowed = {"pull"}  # the account can log in and read, not push
    with (
        running_token_server(issuer) as realm,
        running_registry(tmp_path / "ro", token=(issuer, realm)) as readonly,
    ):
        client = Registry(readonly.host, credentials=Credentials(USER, PASSWORD))
        client.ping()
        assert client.manifest_exists("rel-ro/meshctl", "8.0.0") is None  # pull works
        with pytest.raises(RegistryError):
            client.check_push("rel-ro/meshctl")
        repo = make_repo(tmp_path / "repo")
        env = release_env(hubs, pypiserver, f"rel-ro-{RUN}")
        user_var = "SHIPYARD_REGISTRY_" + readonly.host.replace(".", "_").replace(":", "_")
        env["HUB_B"] = f"{readonly.host}/rel-ro"
        env[f"{user_var}_USER"] = USER
        env[f"{user_var}_PASSWORD"] = PASSWORD
        ctx = context(repo, env, ReleaseOptions(version="8.0.0"))
        with pytest.raises(UsageError, match=rf"hub {re.escape(readonly.host)}/rel-ro") as caught:
            release(ctx)
    assert caught.value.exit_code == 2
    assert [(r.name, r.status) for r in ctx.results][:2] == [
        ("preflight", "failed"),
        ("build", "skipped"),
    ]
    assert _no_wheels(repo)


# -- release atomicity: uploads first, tags last, staged files re-checked ------------------

_REFUSED = json.dumps({"errors": [{"code": "MANIFEST_INVALID", "message": "refused"}]}).encode()


def _after(count: int, method: str, part: str) -> Callable[[str, str], bool]:
    """A proxy match refusing `method` requests with `part` in their path after `count` pass."""
    seen = [0]

    def match(got: str, path: str) -> bool:
        if got != method or part not in path:
            return False
        seen[0] += 1
        return seen[0] > count

    return match


def _tags_on(host: str, prefixes: tuple[str, ...], tags: tuple[str, ...]) -> dict[str, str | None]:
    """prefix/binary:tag -> digest (None when absent) on the registry at `host`."""
    client = Registry(host)
    return {
        f"{prefix}/{binary}:{tag}": client.manifest_exists(f"{prefix}/{binary}", tag)
        for prefix in prefixes
        for binary in ("meshctl", "mesh-agent")
        for tag in tags
    }


def _sent(*proxies: FaultProxy) -> int:
    """Uploads through `proxies`: every PUT and PATCH (blobs, manifests, tags)."""
    return sum(p.count("PUT") + p.count("PATCH") for p in proxies)


FAILURES = ("hub-b-manifest", "hub-b-blob", "index-upload")


@pytest.mark.reliability
@pytest.mark.parametrize("failing", FAILURES)
def test_a_release_failing_part_way_moves_no_tag_and_a_rerun_finishes(
    services: Services, pypiserver: PackageServer, tmp_path: Path, failing: str
) -> None:
    repo = make_repo(tmp_path / "repo")
    prefix = f"rel-atomic-{failing}-{RUN}"
    version = f"9.0.{FAILURES.index(failing)}"  # the index is shared by the module's tests
    tags = (version, "latest")
    index_host = urlsplit(pypiserver.url).netloc
    with (
        running_proxy(services.registry, rate=0.0) as hub_a,
        running_proxy(services.registry, rate=0.0) as hub_b,
        running_proxy(index_host, rate=0.0) as index,
    ):
        env = {
            **os.environ,
            "HUB_A": f"{hub_a.host}/{prefix}-a",
            "HUB_B": f"{hub_b.host}/{prefix}-b",
            "SHIPYARD_INDEX_URL": index.url,
            "SHIPYARD_INDEX_USER": INDEX_USER,
            "SHIPYARD_INDEX_PASSWORD": INDEX_PASSWORD,
        }
        if failing == "hub-b-manifest":  # the second hub takes one manifest, then refuses
            hub_b.force(400, body=_REFUSED, match=_after(1, "PUT", "/manifests/"))
        elif failing == "hub-b-blob":  # the second hub takes two blobs, then refuses
            hub_b.force(400, body=_REFUSED, match=_after(2, "PUT", "/blobs/uploads/"))
        else:  # the index takes the credentials check and one wheel, then refuses
            index.force(403, body=b"forbidden", match=_after(2, "POST", "/"))
        before = index_files(pypiserver)
        ctx = context(repo, env, ReleaseOptions(version=version))
        with pytest.raises((RegistryError, PackageIndexError)):
            release(ctx)
        assert [(r.name, r.status) for r in ctx.results][-2:] == [
            ("publish", "failed"),
            ("verify", "skipped"),
        ]
        # Nothing is tagged on either hub: no pull of 9.0.0 or latest sees a part.
        tagged = _tags_on(services.registry, (f"{prefix}-a", f"{prefix}-b"), tags)
        moved = {k: v for k, v in tagged.items() if v is not None}
        assert moved == {}, f"{failing}: tags moved before every upload succeeded: {moved}"
        uploaded_wheels = index_files(pypiserver) - before
        if failing != "index-upload":
            assert uploaded_wheels == set(), "wheels go after every image is on every hub"

        # A staged file changed between runs: the resumed publish refuses, sends nothing.
        folder = repo / "dist" / "release" / version
        staged = json.loads((folder / "release.json").read_text())
        wheel = folder / next(a["path"] for a in staged["artifacts"] if a["kind"] == "wheel")
        original = wheel.read_bytes()
        wheel.write_bytes(original + b"tampered")
        for proxy in (hub_a, hub_b, index):
            proxy.clear()
        sent, files = _sent(hub_a, hub_b), index_files(pypiserver)
        again = context(repo, env, ReleaseOptions(version=version))
        with pytest.raises(UsageError) as caught:
            release(again)
        assert caught.value.exit_code == 2
        assert str(wheel) in str(caught.value) and "changed since it was staged" in str(
            caught.value
        )
        assert _sent(hub_a, hub_b) == sent, "nothing was pushed"
        assert index_files(pypiserver) == files, "nothing was uploaded"

        # Fixed: the re-run resumes and finishes; every tag names the staged digest.
        wheel.write_bytes(original)
        final = context(repo, env, ReleaseOptions(version=version))
        release(final)
        assert [r.status for r in final.results][-2:] == ["ran", "ran"]
    images = {a["binary"]: a["digest"] for a in staged["artifacts"] if a["kind"] == "image"}
    assert _tags_on(services.registry, (f"{prefix}-a", f"{prefix}-b"), tags) == {
        f"{hub_prefix}/{binary}:{tag}": images[binary]
        for hub_prefix in (f"{prefix}-a", f"{prefix}-b")
        for binary in ("meshctl", "mesh-agent")
        for tag in tags
    }
    record(
        f"release failing part-way ({failing})",
        area="release atomicity",
        cases=2,
        injected=f"{failing}: a refusal part-way through publish, then a staged wheel "
        "changed before the re-run",
        result=f"0 tags of {version} or latest moved on either hub before every upload "
        f"succeeded ({len(uploaded_wheels)} wheels already public); the tampered re-run "
        "exited 2 naming the file with 0 uploads; the fixed re-run finished and verified",
        figures={"tags_moved_early": 0, "uploads_after_tamper": 0},
    )
