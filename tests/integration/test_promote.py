"""Promotion of a staged release from a staging registry to a final one with basic auth.

One release of meshctl (real wheels, the stand-in two-platform image builder of
_release.py) is published, in CI, to a staging hub on the shared registry and a
staging pypiserver; `shipyard promote` (the CLI, in its own process) then copies
it to a registry started here that asks for basic authentication. What holds:

- the final hub is protected (image.protected): outside CI the promotion stops
  with exit 2 before anything is sent; with CI set it runs;
- the final hub serves the very digests of release.json (index and every
  platform manifest, read back by skopeo too), the version and `latest` tags
  are there, moved after everything else, and the wheels are on the final index
  with their staged sha256;
- no build ran: every file under dist/ (report.json among them) is byte for
  byte, to the nanosecond, what the release left;
- a second run changes nothing; a final hub on the staging registry gets its
  blobs by mount (`invoke promote`, the same command through invoke);
- no-clobber: `latest` on another image moves (a movable tag), the version tag
  on another image stops the promotion (exit 2) unless --clobber;
- a staging image replaced after the release stops it before any tag moves;
- the image's SBOM attachments (`sha256-<hex>.sbom`) arrive at the final hub; a
  release staged signed is promoted only with its key (exit 2 and nothing sent
  without it), and then the image is signed for its final repository (openssl
  checks the signature, `shipyard verify` accepts the image) and the staged
  provenance attached byte for byte, all before any tag moves.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from shipyard.artifacts import Distribution, Installed
from shipyard.engine.keys import ActionKey, Inputs
from shipyard.engine.plan import Action
from shipyard.engine.scheduler import Artifact, BuildContext, Builder
from shipyard.oci.remote.auth import Credentials
from shipyard.oci.remote.push import Publisher
from shipyard.oci.remote.registry import Registry
from shipyard.release import ReleaseOptions, release
from shipyard.release.keys import generate_keypair
from shipyard.release.provenance import read_provenance
from shipyard.release.signing import attached_tag, fetch_blob
from shipyard.release.staged import SUMS_SIG
from tests.integration._release import BUILDERS as STAND_INS
from tests.integration._release import (
    INDEX_PASSWORD,
    INDEX_USER,
    RUN,
    Hubs,
    LayoutImageBuilder,
    PackageServer,
    context,
    hubs,
    make_repo,
    pypiserver,
)
from tests.integration.conftest import REPO, Services
from tests.integration.pypi import package_index
from tests.integration.registries import PASSWORD, USER
from tests.integration.test_push import make_layout, skopeo_raw
from tests.integration.test_signing import _openssl_verify

__all__ = ["hubs", "pypiserver"]  # fixtures the tests take, imported for pytest to find
pytestmark = [pytest.mark.integration, pytest.mark.requires("registry", "skopeo")]

VERSION = "1.0.0"
TAGS = (VERSION, "latest")

# The smallest example: one binary, its wheel (and its library's) and its image.
# HUB unset, the final hub is the registry with basic auth; the release ran with
# HUB set to the staging hub. The hub is protected: releases and promotions run in CI.
MANIFEST = """\
schema: 1
project: {name: mesh, version: git, python: "3.11"}
binaries:
  meshctl:
    source: ctl
    entrypoint: "meshctl.cli:main"
    outputs: [wheel, image]
    platforms: [linux/amd64, linux/arm64]
    image:
      hubs: ["${HUB:-FINAL_HUB}"]
      protected: ["${HUB:-FINAL_HUB}"]
      tags: [latest]
"""


class SbomImageBuilder(LayoutImageBuilder):
    """The stand-in image builder, saying what each platform got (meshctl), so that
    staging writes an SBOM per platform and publish attaches them beside the image."""

    def inputs(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Inputs:
        return {**super().inputs(action, ctx, deps), "installed": "meshctl"}

    def build(
        self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], key: ActionKey
    ) -> tuple[Artifact, ...]:
        (art,) = super().build(action, ctx, deps, key)
        assert art.metadata.image is not None
        got = (Distribution(action.binaries[0], ctx.stamp.version, first_party=True),)
        installed = tuple(Installed(m.platform, got) for m in art.metadata.image.manifests)
        return (replace(art, metadata=replace(art.metadata, installed=installed)),)


BUILDERS: dict[str, Builder] = {**STAND_INS, "image": SbomImageBuilder()}


@dataclass(frozen=True)
class Staged:
    """A release of meshctl published to the staging hub, ready to promote."""

    repo: Path
    staging: str  # the staging hub
    final: str  # the hub image.hubs names when HUB is unset
    image: dict[str, Any]  # release.json's image entry
    wheels: dict[str, str]  # file name -> sha256, from release.json
    dist: dict[str, tuple[int, int, str]]  # dist/ after the release: path -> size, mtime, sha256
    env: dict[str, str]  # what `shipyard promote` runs with
    index: PackageServer  # the final package index


@pytest.fixture(scope="module")
def staged(
    hubs: Hubs, pypiserver: PackageServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Staged]:
    folder = tmp_path_factory.mktemp("promote")
    staging, final = f"{hubs.open}/promo-stage-{RUN}", f"{hubs.basic.host}/promo-{RUN}"
    user_var = "SHIPYARD_REGISTRY_" + hubs.basic.host.replace(".", "_").replace(":", "_")
    base = {k: v for k, v in os.environ.items() if k not in ("HUB", "VERSION", "CI")}
    base |= {f"{user_var}_USER": USER, f"{user_var}_PASSWORD": PASSWORD}
    with package_index(folder / "staging-index", INDEX_USER, INDEX_PASSWORD) as staging_index:
        repo = make_repo(folder / "repo", MANIFEST.replace("FINAL_HUB", final))
        env = base | {
            "CI": "true",
            "HUB": staging,
            "SHIPYARD_INDEX_URL": staging_index,
            "SHIPYARD_INDEX_USER": INDEX_USER,
            "SHIPYARD_INDEX_PASSWORD": INDEX_PASSWORD,
        }
        ctx = context(repo, env, ReleaseOptions(version=VERSION), builders=BUILDERS)
        release(ctx)
    assert [r.status for r in ctx.results] == ["ran"] * 6
    release_json = json.loads((repo / "dist" / "release" / VERSION / "release.json").read_text())
    (image,) = [a for a in release_json["artifacts"] if a["kind"] == "image"]
    assert image["hubs"] == [staging] and image["tags"] == list(TAGS)
    wheels = {
        Path(a["path"]).name: a["sha256"] for a in release_json["artifacts"] if a["kind"] == "wheel"
    }
    report = json.loads((repo / "dist" / "report.json").read_bytes())
    assert report["actions"]  # the release's build is there: what promote must not add to
    yield Staged(
        repo,
        staging,
        final,
        image,
        wheels,
        dist_files(repo),
        base
        | {
            "SHIPYARD_INDEX_URL": pypiserver.url,
            "SHIPYARD_INDEX_USER": INDEX_USER,
            "SHIPYARD_INDEX_PASSWORD": INDEX_PASSWORD,
        },
        pypiserver,
    )


def dist_files(repo: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under dist/: its size, mtime in ns and sha256."""
    return {
        path.relative_to(repo).as_posix(): (
            path.stat().st_size,
            path.stat().st_mtime_ns,
            hashlib.sha256(path.read_bytes()).hexdigest(),
        )
        for path in sorted((repo / "dist").rglob("*"))
        if path.is_file()
    }


def shipyard(
    staged: Staged, *args: str, ci: bool = False, invoke: bool = False
) -> subprocess.CompletedProcess[str]:
    """`shipyard promote --version=1.0.0 ARGS` (or `invoke promote ...`, through this
    repository's tasks.py) in the release's repository; in CI when `ci`."""
    program = ["invoke", "--search-root", str(REPO)] if invoke else ["shipyard"]
    return subprocess.run(
        [sys.executable, "-m", *program, "promote", f"--version={VERSION}", *args],
        cwd=staged.repo,
        env=staged.env | ({"CI": "true"} if ci else {}),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def basic_client(hubs: Hubs) -> Registry:
    return Registry(hubs.basic.host, credentials=Credentials(USER, PASSWORD))


def test_promote_copies_every_digest_to_a_registry_with_auth_and_builds_nothing(
    services: Services, hubs: Hubs, staged: Staged
) -> None:
    digest, repo = staged.image["digest"], f"promo-{RUN}/meshctl"
    client = basic_client(hubs)
    # The final hub is protected: outside CI, exit 2 before a byte is sent.
    refused = shipyard(staged, f"--from={staged.staging}")
    assert refused.returncode == 2, refused.stderr
    assert f"meshctl -> {staged.final}: protected hub (image.protected)" in refused.stderr
    assert "--force-protected to `shipyard promote`" in refused.stderr
    assert client.manifest_exists(repo, digest) is None
    assert not [n for n in staged.index.packages.iterdir() if n.name in staged.wheels]
    # In CI (CI set): promoted.
    done = shipyard(staged, f"--from={staged.staging}", ci=True)
    assert done.returncode == 0, done.stderr
    print(done.stdout, end="")  # what the closing note of issue 15 quotes (pytest -rP)
    assert f"verified staging {staged.staging}/meshctl:{VERSION} is {digest}" in done.stderr
    assert f"{hubs.basic.host}/{repo}@{digest} tags: {', '.join(TAGS)}" in done.stdout
    for tag in TAGS:  # the tags, on the index of the very digest release.json names
        assert client.manifest_exists(repo, tag) == digest
        raw = skopeo_raw(f"{hubs.basic.host}/{repo}:{tag}", f"{USER}:{PASSWORD}")
        assert "sha256:" + hashlib.sha256(raw).hexdigest() == digest
    listed = [m["digest"] for m in json.loads(raw)["manifests"]]
    assert listed == [m["digest"] for m in staged.image["manifests"]] and len(listed) == 2
    sboms = [staged.image["sbom"], *staged.image["sbom"]["platforms"]]
    assert len(sboms) == 3  # the SBOMs attached beside it, as release publish attaches them
    assert [client.manifest_exists(repo, s["tag"]) for s in sboms] == [s["digest"] for s in sboms]
    for child in listed:  # every platform manifest, byte for byte
        data, _, found = client.get_manifest(repo, child)
        assert found == child == "sha256:" + hashlib.sha256(data).hexdigest()
        print(f"final {hubs.basic.host}/{repo}@{found}: platform manifest, as staged")
    # Tags moved last (after every blob, manifest and wheel), the version tag first.
    lines = done.stderr.splitlines()
    tagged = [n for n, line in enumerate(lines) if line.startswith("tagged ")]
    sent = [n for n, line in enumerate(lines) if line.startswith(("copied", "pushed", "uploaded"))]
    assert len(tagged) == 2 and len(sent) == 5 + 3 + 2 and max(sent) < min(tagged)
    assert [lines[n].split(" ")[1].rpartition(":")[2] for n in tagged] == list(TAGS)
    # The staged wheels, on the final index with the bytes release.json lists.
    for name, sha256 in staged.wheels.items():
        served = staged.index.packages / name
        assert hashlib.sha256(served.read_bytes()).hexdigest() == sha256
        print(f"final index {name}: sha256 {sha256}, as staged")
    assert len(staged.wheels) == 2  # meshctl and the mesh-api library it requires
    # Nothing was built: every file under dist/ (report.json, the staged release, the
    # build outputs) is what the release left, to the byte and the nanosecond, and no
    # file was added (promote's scratch folder is gone).
    assert dist_files(staged.repo) == staged.dist
    assert "build" not in done.stderr.lower()
    print(f"dist/: {len(staged.dist)} files unchanged, report.json among them")
    # Again: every step finds its target; nothing is sent.
    again = shipyard(staged, f"--from={staged.staging}", "--json", ci=True)
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert result["blobs_copied"] == result["blobs_mounted"] == result["tags_moved"] == 0
    assert result["manifests_pushed"] == result["wheels_uploaded"] == 0
    assert [i["digest"] for i in result["images"]] == [digest]
    assert dist_files(staged.repo) == staged.dist


def test_a_final_hub_on_the_staging_registry_gets_every_blob_by_mount(
    services: Services, hubs: Hubs, staged: Staged
) -> None:
    final = f"{hubs.open}/promo-mount-{RUN}"
    dry = shipyard(staged, f"--from={staged.staging}", f"--to={final}", "--dry-run", invoke=True)
    assert dry.returncode == 0, dry.stderr
    assert f"would copy {staged.staging}/meshctl@{staged.image['digest']}" in dry.stderr
    assert "(mounting blobs)" in dry.stderr
    assert f"would tag {final}/meshctl:{VERSION} -> {staged.image['digest']}" in dry.stderr
    assert Registry(hubs.open).manifest_exists(f"promo-mount-{RUN}/meshctl", VERSION) is None
    done = shipyard(staged, f"--from={staged.staging}", f"--to={final}", "--json", invoke=True)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    # 2 configs, 2 per-platform layers, 1 shared layer: none uploaded, all mounted.
    assert (result["blobs_mounted"], result["blobs_copied"], result["bytes_copied"]) == (5, 0, 0)
    assert result["manifests_pushed"] == 3 and result["tags_moved"] == 2
    for tag in TAGS:
        found = Registry(hubs.open).manifest_exists(f"promo-mount-{RUN}/meshctl", tag)
        assert found == staged.image["digest"]


def test_a_staging_image_replaced_after_the_release_fails_before_any_tag_moves(
    services: Services, hubs: Hubs, staged: Staged, tmp_path: Path
) -> None:
    # A staging hub of its own (promoted there from the real one), then tampered with.
    staging = f"{hubs.open}/promo-tamper-stage-{RUN}"
    copied = shipyard(staged, f"--from={staged.staging}", f"--to={staging}")
    assert copied.returncode == 0, copied.stderr
    other = make_layout(tmp_path / "other", ("linux/amd64", "linux/arm64"), "tampered")
    Publisher().push("meshctl", tmp_path / "other", [staging], [VERSION])
    final = f"{hubs.basic.host}/promo-tamper-{RUN}"
    done = shipyard(staged, f"--from={staging}", f"--to={final}")
    assert done.returncode == 1, done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("shipyard: error: meshctl: the staging hub " + staging)
    assert other in error and staged.image["digest"] in error
    assert "no tag moved" in error
    client = basic_client(hubs)
    repo = f"promo-tamper-{RUN}/meshctl"
    assert [client.manifest_exists(repo, ref) for ref in (*TAGS, staged.image["digest"])] == [
        None
    ] * 3


def test_no_clobber_moves_latest_but_not_the_version_tag_unless_clobber(
    services: Services, hubs: Hubs, staged: Staged, tmp_path: Path
) -> None:
    digest, repo = staged.image["digest"], f"promo-clobber-{RUN}/meshctl"
    final = f"{hubs.open}/promo-clobber-{RUN}"
    other = make_layout(tmp_path / "other", ("linux/amd64", "linux/arm64"), "someone else")
    client = Registry(hubs.open)
    # `latest` on another image: a movable tag (image.movable_tags' default), it moves.
    Publisher().push("meshctl", tmp_path / "other", [final], ["latest"])
    done = shipyard(staged, f"--from={staged.staging}", f"--to={final}")
    assert done.returncode == 0, done.stderr
    assert [client.manifest_exists(repo, tag) for tag in TAGS] == [digest, digest]
    # The version tag on another image: exit 2 before anything is sent.
    Publisher().push("meshctl", tmp_path / "other", [final], [VERSION])
    Publisher().push("meshctl", tmp_path / "other", [final], ["latest"])
    refused = shipyard(staged, f"--from={staged.staging}", f"--to={final}")
    assert refused.returncode == 2, refused.stderr
    error = refused.stderr.strip().splitlines()[-1]
    assert f"{final}/meshctl:{VERSION} is {other}" in error
    assert "the version is already released (no-clobber)" in error and "--clobber" in error
    assert [client.manifest_exists(repo, tag) for tag in TAGS] == [other, other]
    # --clobber: both tags move to release.json's digest.
    moved = shipyard(staged, f"--from={staged.staging}", f"--to={final}", "--clobber")
    assert moved.returncode == 0, moved.stderr
    assert f"--clobber: {final}/meshctl:{VERSION} ({other}) will move" in moved.stderr
    assert [client.manifest_exists(repo, tag) for tag in TAGS] == [digest, digest]


def test_a_signed_release_is_promoted_with_its_sboms_signatures_and_provenance(
    services: Services, hubs: Hubs, staged: Staged, tmp_path: Path
) -> None:
    """A release staged signed and published to the staging hub (SBOMs, .sig, .att
    beside its image), promoted with its key to the registry with auth: the SBOM
    attachments arrive byte for byte, the image is signed anew for the final
    repository (a staging signature names the staging one), the staged provenance is
    attached as it is; without the key, exit 2 and nothing is sent."""
    key, public = tmp_path / "cosign.key", tmp_path / "cosign.pub"
    generate_keypair(key, public)
    staging = f"{hubs.open}/promo-signed-stage-{RUN}"
    final = f"{hubs.basic.host}/promo-signed-{RUN}"
    staging_repo, final_repo = f"promo-signed-stage-{RUN}/meshctl", f"promo-signed-{RUN}/meshctl"
    # Images only: no wheel, so no package index on either side.
    manifest = MANIFEST.replace("FINAL_HUB", final).replace("[wheel, image]", "[image]")
    repo = make_repo(tmp_path / "repo", manifest)
    env = {k: v for k, v in staged.env.items() if not k.startswith("SHIPYARD_INDEX_")}
    signing = {"SHIPYARD_SIGNING_KEY": str(key)}
    options = ReleaseOptions(version=VERSION)
    ctx = context(repo, env | signing | {"CI": "true", "HUB": staging}, options, builders=BUILDERS)
    release(ctx)
    assert [r.status for r in ctx.results] == ["ran"] * 6
    folder = repo / "dist" / "release" / VERSION
    assert (folder / SUMS_SIG).is_file()
    (image,) = [
        a
        for a in json.loads((folder / "release.json").read_text())["artifacts"]
        if a["kind"] == "image"
    ]
    digest, attachments = image["digest"], [image["sbom"], *image["sbom"]["platforms"]]
    assert len(attachments) == 3  # the index's SBOM and each platform's
    (envelope,) = read_provenance(folder)
    client, open_client = basic_client(hubs), Registry(hubs.open)
    sig_tag, att_tag = attached_tag(digest, "sig"), attached_tag(digest, "att")
    assert open_client.manifest_exists(staging_repo, sig_tag) is not None  # staged signed

    def promote(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "shipyard", "promote", f"--version={VERSION}", *args],
            cwd=repo,
            env=env | {"CI": "true"},
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )

    # Without the key: exit 2 before anything is sent to the final hub.
    refused = promote(f"--from={staging}")
    assert refused.returncode == 2, refused.stderr
    assert "staged signed (SHA256SUMS.sig), but no signing key is given" in refused.stderr
    for ref in (digest, *TAGS, sig_tag, att_tag, *(a["tag"] for a in attachments)):
        assert client.manifest_exists(final_repo, ref) is None, ref
    # A dry run with the key says what it would attach and sign, and sends nothing.
    dry = promote(f"--from={staging}", f"--signing-key={key}", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"would sign {final}/meshctl@{digest} (--signing-key {key})" in dry.stderr
    assert f"would attach the provenance to {final}/meshctl@{digest}" in dry.stderr
    for about in attachments:
        assert f"would attach {final}/meshctl:{about['tag']} -> {about['digest']}" in dry.stderr
    assert client.manifest_exists(final_repo, sig_tag) is None
    # With the key: promoted, signed and attested at the final hub before any tag moved.
    done = promote(f"--from={staging}", f"--signing-key={key}")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    first_tag = min(n for n, line in enumerate(lines) if line.startswith("tagged "))
    for mark in (f"{final_repo}:{sig_tag} -> ", f"{final_repo}:{att_tag} -> ", ".sbom -> "):
        assert max(n for n, line in enumerate(lines) if mark in line) < first_tag, mark
    assert f"verified the signature of {final}/meshctl@{digest}" in done.stderr
    # The SBOMs: the very manifests and documents the staging hub has.
    for about in attachments:
        data, _, found = client.get_manifest(final_repo, about["tag"])
        assert (data, found) == open_client.get_manifest(staging_repo, about["tag"])[::2]
        assert found == about["digest"]
        layers = json.loads(data)["layers"]
        documents = [
            fetch_blob(client, final_repo, layer["digest"], layer["size"]) for layer in layers
        ]
        assert documents == [(folder / rel).read_bytes() for rel in about["documents"]]
    # The signature: over a payload naming the final repository, checked by openssl.
    (layer,) = json.loads(client.get_manifest(final_repo, sig_tag)[0])["layers"]
    payload = fetch_blob(client, final_repo, layer["digest"], layer["size"])
    critical = json.loads(payload)["critical"]
    assert critical["identity"]["docker-reference"] == f"{hubs.basic.host}/{final_repo}"
    assert critical["image"]["docker-manifest-digest"] == digest
    signature = base64.b64decode(layer["annotations"]["dev.cosignproject.cosign/signature"])
    assert _openssl_verify(public, signature, payload, tmp_path / "o") == "Verified OK"
    assert _openssl_verify(public, signature, payload + b" ", tmp_path / "x") != "Verified OK"
    # The attestation: the staged envelope, byte for byte.
    (layer,) = json.loads(client.get_manifest(final_repo, att_tag)[0])["layers"]
    assert fetch_blob(client, final_repo, layer["digest"], layer["size"]) == envelope
    # `shipyard verify` accepts the final image with the public key.
    verified = subprocess.run(
        [sys.executable, "-m", "shipyard", "verify", f"{final}/meshctl:{VERSION}", "--key", public],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert verified.returncode == 0, verified.stderr
    assert f"verified {final}/meshctl@{digest}" in verified.stdout
    # Again: everything is there; nothing is attached or signed twice.
    again = promote(f"--from={staging}", f"--signing-key={key}", "--json")
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert result["sboms_attached"] == result["signatures_pushed"] == 0
    assert result["attestations_pushed"] == result["tags_moved"] == 0
