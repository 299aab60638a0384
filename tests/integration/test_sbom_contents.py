"""SBOMs against what shipped: a real release of the mesh example (mesh-agent pulls
PyYAML, native on both platforms; meshctl is a universal zipapp), each SBOM compared
with the `*.dist-info` folders inside the artifact it describes, and each image's
attached SBOM read back from the registry.

Inside a zipapp the distributions are under `site/`; inside an image, in the layers
shipyard added above the base (the base is the SBOM's `container` component).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packaging.utils import canonicalize_name

from shipyard.builders import BUILDERS as REAL_BUILDERS
from shipyard.errors import UsageError
from shipyard.oci.mediatypes import CYCLONEDX_JSON, OCI_MANIFEST
from shipyard.oci.remote.push import Publisher
from shipyard.oci.remote.registry import Registry
from shipyard.release import ReleaseOptions, publishers, release
from shipyard.release.attachments import staged_attachments
from shipyard.release.journal import Journal
from shipyard.release.publish import LayoutSource, publish_job
from shipyard.release.sbom import FIRST_PARTY
from tests.integration._release import RUN, context, make_repo
from tests.integration.conftest import Services
from tests.integration.test_push import skopeo_raw

pytestmark = [
    pytest.mark.integration,
    pytest.mark.requires("registry", "skopeo", "base-layout", "docker"),
]

MANIFEST = """\
schema: 1
project: {name: mesh, version: git, python: "3.11"}
defaults:
  platforms: [linux/amd64, linux/arm64]
  image:
    base: "oci-layout:${BASE_LAYOUT}"
    hubs: ["${HUB_A}"]
binaries:
  meshctl: {source: ctl, entrypoint: "meshctl.cli:main", outputs: [zipapp]}
  mesh-agent: {source: agent, entrypoint: "meshagent.main:main", outputs: [zipapp, image]}
"""

_FIELD = re.compile(r"^(Name|Version):\s*(.+?)\s*$", re.MULTILINE)


def _name_version(metadata: bytes) -> tuple[str, str]:
    head = metadata.decode("utf-8", "replace").split("\n\n", 1)[0]
    fields = dict(_FIELD.findall(head))
    return str(canonicalize_name(fields["Name"])), fields["Version"]


def _in_zipapp(path: Path) -> set[tuple[str, str]]:
    with zipfile.ZipFile(path) as archive:
        return {
            _name_version(archive.read(name))
            for name in archive.namelist()
            if re.fullmatch(r"site/[^/]+\.dist-info/METADATA", name)
        }


def _blob(layout: Path, digest: str) -> bytes:
    algorithm, _, hexpart = digest.partition(":")
    return (layout / "blobs" / algorithm / hexpart).read_bytes()


def _in_layers(layout: Path, manifest_digest: str, base_layers: set[str]) -> set[tuple[str, str]]:
    manifest = json.loads(_blob(layout, manifest_digest))
    found: set[tuple[str, str]] = set()
    for layer in manifest["layers"]:
        if layer["digest"] in base_layers:
            continue
        data = _blob(layout, layer["digest"])
        raw = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            for member in tar.getmembers():
                if member.isfile() and re.search(r"[^/]+\.dist-info/METADATA$", member.name):
                    handle = tar.extractfile(member)
                    assert handle is not None
                    found.add(_name_version(handle.read()))
    return found


def _base_layers(base_layout: Path) -> set[str]:
    """Every layer digest of every platform of the base image's layout."""
    found: set[str] = set()
    todo = [d["digest"] for d in json.loads((base_layout / "index.json").read_text())["manifests"]]
    while todo:
        data = json.loads(_blob(base_layout, todo.pop()))
        todo += [d["digest"] for d in data.get("manifests", [])]
        found |= {d["digest"] for d in data.get("layers", [])}
    return found


def _listed(sbom: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (str(canonicalize_name(c["name"])), c["version"])
        for c in sbom["components"]
        if str(c.get("purl", "")).startswith("pkg:pypi/")
    }


def test_each_sbom_lists_exactly_what_its_artifact_holds(
    services: Services, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", MANIFEST)
    prefix = f"sbom-{RUN}"
    env = {
        **os.environ,
        "HUB_A": f"{services.registry}/{prefix}",
        "BASE_LAYOUT": str(services.base_layout),
    }
    for name in ("SHIPYARD_INDEX_URL", "SHIPYARD_INDEX_USER", "SHIPYARD_INDEX_PASSWORD"):
        env.pop(name, None)
    lines: list[str] = []
    ctx = context(repo, env, ReleaseOptions(version="1.0.0"), lines, REAL_BUILDERS)
    release(ctx)
    folder = repo / "dist" / "release" / "1.0.0"
    staged = json.loads((folder / "release.json").read_text())
    sums = (folder / "SHA256SUMS").read_text()
    sboms = [a for a in staged["artifacts"] if a["kind"] == "sbom"]
    by_of = {a["of"]: a for a in sboms}
    validator = JsonStrictValidator(SchemaVersion.V1_6)
    wheels = {
        str(canonicalize_name(p.name.split("-")[0])): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (repo / "dist" / "wheels").glob("*.whl")
    }
    counts: dict[str, int] = {}

    def check(entry: dict[str, Any], holds: set[tuple[str, str]]) -> dict[str, Any]:
        rel = str(entry["path"])
        text = (folder / rel).read_text()
        assert validator.validate_str(text) is None, rel
        assert f"{entry['sha256']}  {rel}" in sums
        sbom: dict[str, Any] = json.loads(text)
        assert _listed(sbom) == holds, rel
        assert ("pyyaml" in {n for n, _ in holds}) == (entry["binary"] == "mesh-agent")
        for component in sbom["components"]:
            if not component.get("purl", "").startswith("pkg:pypi/"):
                continue
            key = str(canonicalize_name(component["name"]))
            hashes = [h["content"] for h in component.get("hashes", []) if h["alg"] == "SHA-256"]
            assert len(hashes) == 1, (rel, key)  # every wheel installed here is known
            first = {p["name"]: p["value"] for p in component.get("properties", [])}
            assert (first.get(FIRST_PARTY) == "true") == (key in wheels), (rel, key)
            if key in wheels:
                assert hashes == [wheels[key]], (rel, key)
        counts[rel] = len(sbom["components"])
        return sbom

    # Zipapps: one SBOM each, the universal meshctl one for `any`.
    zipapps = [a for a in staged["artifacts"] if a["kind"] == "zipapp"]
    assert sorted(a["platform"] for a in zipapps) == ["any", "linux/amd64", "linux/arm64"]
    for art in zipapps:
        entry = by_of[art["path"]]
        assert (entry["binary"], entry["platform"]) == (art["binary"], art["platform"])
        holds = _in_zipapp(folder / art["path"])
        assert len(holds) >= 2
        check(entry, holds)
    # The mesh-agent zipapps differ in PyYAML's wheel (native), not in what is listed.
    agent = {
        a["platform"]: json.loads((folder / by_of[a["path"]]["path"]).read_text())
        for a in zipapps
        if a["binary"] == "mesh-agent"
    }
    yaml_hashes = {
        platform: next(c["hashes"][0]["content"] for c in s["components"] if c["name"] == "PyYAML")
        for platform, s in agent.items()
    }
    assert len(set(yaml_hashes.values())) == 2, yaml_hashes
    # Images: one SBOM per platform, against the layers above the base.
    base_layers = _base_layers(services.base_layout)
    (image,) = [a for a in staged["artifacts"] if a["kind"] == "image"]
    layout = folder / image["path"]
    documents = []
    for manifest in image["manifests"]:
        entry = by_of[manifest["digest"]]
        assert entry["platform"] == manifest["platform"] and entry["image"] == image["digest"]
        holds = _in_layers(layout, manifest["digest"], base_layers)
        sbom = check(entry, holds)
        (base,) = [c for c in sbom["components"] if c["type"] == "container"]
        assert base["version"].startswith("sha256:")
        documents.append(entry["path"])
    assert sorted(m["platform"] for m in image["manifests"]) == ["linux/amd64", "linux/arm64/v8"]
    # Attached on the hub: the .sbom tag's layers are the staged documents.
    about = image["sbom"]
    assert about["tag"] == "sha256-" + image["digest"].removeprefix("sha256:") + ".sbom"
    assert about["documents"] == documents
    assert about["references"] == [f"{services.registry}/{prefix}/mesh-agent:{about['tag']}"]
    client = Registry(services.registry)
    repo_name = f"{prefix}/mesh-agent"

    def pulled_layers(tag: str, digest: str) -> list[bytes]:
        data, media_type, found = client.get_manifest(repo_name, tag, accept=(OCI_MANIFEST,))
        assert found == digest and media_type.startswith(OCI_MANIFEST), tag
        layers = json.loads(data)["layers"]
        assert {layer["mediaType"] for layer in layers} == {CYCLONEDX_JSON}
        out = []
        for layer in layers:
            target = tmp_path / "pulled"
            client.pull_blob(repo_name, layer["digest"], target)
            out.append(target.read_bytes())
        return out

    # The index's: one layer per platform; each platform's: its own one (as ko does).
    staged_bytes = [(folder / rel).read_bytes() for rel in documents]
    assert pulled_layers(about["tag"], about["digest"]) == staged_bytes
    # skopeo, a client shipyard does not contain, finds the tag with the same manifest.
    raw = skopeo_raw(about["references"][0])
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == about["digest"]
    assert [p["of"] for p in about["platforms"]] == [m["digest"] for m in image["manifests"]]
    for one, data in zip(about["platforms"], staged_bytes, strict=True):
        assert one["tag"] == "sha256-" + one["of"].removeprefix("sha256:") + ".sbom"
        assert one["references"] == [f"{services.registry}/{repo_name}:{one['tag']}"]
        assert pulled_layers(one["tag"], one["digest"]) == [data]
    assert any(line.startswith("attached ") for line in lines), lines
    # Attaching again (a publish resumed without its journal) pushes nothing.
    again: list[str] = []
    ctx.on_step = again.append
    assert ctx.staged is not None
    clients = Publisher(ctx.registry_for)
    job = publish_job(ctx, ctx.staged, LayoutSource({}, clients), clients)
    job.attachments = staged_attachments(ctx.release_dir, ctx.staged, UsageError)
    runner = publishers.Runner(Journal(tmp_path / "journal"), False, ctx.on_step)
    for step in publishers.sboms(job):
        runner.run(step)
    assert again == [
        f"have {ref}" for one in (about, *about["platforms"]) for ref in one["references"]
    ]
    print("components per SBOM:", json.dumps(counts, sort_keys=True))
