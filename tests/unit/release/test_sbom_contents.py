"""SBOMs of an artifact's contents: what the installers record (wheel sha256, license,
first-party), how artifacts carry it, the CycloneDX document and the attachment manifest.

Resolutions are real (uv and pip, offline, from a local find-links folder).
"""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from shipyard.artifacts import Distribution, Installed, Metadata
from shipyard.builders.distributions import _license
from shipyard.builders.resolve import resolve
from shipyard.oci.mediatypes import CYCLONEDX_JSON, OCI_CONFIG, OCI_MANIFEST
from shipyard.oci.remote.attach import attached_tag
from shipyard.release.attachments import PLATFORM_NOTE, attachment
from shipyard.release.publish import publish_steps
from shipyard.release.sbom import FIRST_PARTY, BaseImage, contents_sbom
from shipyard.release.staged import parse_release
from tests.unit.builders.test_resolve import offline_env

EPOCH = 315532800
DIGEST = "sha256:" + "ab" * 32


def _wheel(folder: Path, name: str, version: str, headers: str, requires: str = "") -> Path:
    """A pure wheel whose METADATA carries `headers` (and `requires`)."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\n{headers}"
    meta += f"Requires-Dist: {requires}\n" if requires else ""
    files = {
        f"{name}/__init__.py": b"",
        f"{info}/METADATA": meta.encode() + b"\nA long description.\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{path},sha256="
        + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        + f",{len(data)}"
        for path, data in files.items()
    ]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(zipfile.ZipInfo(member, (2020, 1, 1, 0, 0, 0)), data)
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("platform", ["linux/amd64", "linux/arm/v7"])  # uv, then pip
def test_resolve_records_each_wheels_sha256_license_and_first_party(
    tmp_path: Path, platform: str
) -> None:
    links = tmp_path / "links"
    dep = _wheel(links, "helper", "2.0", "License-Expression: MIT OR Apache-2.0\n")
    other = _wheel(
        links,
        "classic",
        "3.1",
        "License: UNKNOWN\nClassifier: License :: OSI Approved :: BSD License\n",
    )
    app = _wheel(tmp_path / "own", "app", "1.0", "License: Apache-2.0\n", "helper>=2")
    lib = _wheel(tmp_path / "own", "applib", "0.1", "", "classic")
    found = resolve(
        [app, lib],
        platform,
        "3.11",
        tmp_path / "site",
        env=offline_env(tmp_path, links),
        log=tmp_path / "log",
    )
    got = {d.name: (d.sha256, d.license, d.first_party) for d in found.distributions}
    assert got == {
        "app": (_sha(app), "Apache-2.0", True),
        "applib": (_sha(lib), None, True),
        "helper": (_sha(dep), "MIT OR Apache-2.0", False),
        "classic": (_sha(other), "BSD License", False),
    }


def test_a_long_license_text_falls_back_to_the_classifiers() -> None:
    headers = [
        ("license", "Permission is hereby granted, " * 10),
        ("classifier", "License :: OSI Approved :: MIT License"),
        ("classifier", "License :: Other/Proprietary License"),
        ("classifier", "Programming Language :: Python"),
    ]
    assert _license(headers) == "MIT License; Other/Proprietary License"
    assert _license([("license-expression", "MIT"), ("license", "BSD")]) == "MIT"
    assert _license([]) is None


def test_artifact_metadata_carries_the_installed_facts_and_reads_the_old_form() -> None:
    full = Distribution("PyYAML", "6.0.3", "cd" * 32, "MIT", False)
    own = Distribution("app", "1.0", "ef" * 32, None, True)
    meta = Metadata(installed=(Installed("linux/amd64", (full, own, Distribution("x", "1"))),))
    data = meta.to_json()
    assert data["installed"][0]["distributions"] == [
        ["PyYAML", "6.0.3", {"sha256": "cd" * 32, "license": "MIT"}],
        ["app", "1.0", {"sha256": "ef" * 32, "first_party": True}],
        ["x", "1"],
    ]
    assert Metadata.from_json(json.loads(json.dumps(data))) == meta
    old = {"installed": [{"platform": "linux/amd64", "distributions": [["x", "1"]]}]}
    assert Metadata.from_json(old).distributions() == (Distribution("x", "1"),)
    with pytest.raises(ValueError, match="first_party"):
        Metadata.from_json(
            {"installed": [{"platform": "p", "distributions": [["x", "1", {"first_party": 1}]]}]}
        )


def _dists() -> list[Distribution]:
    return [
        Distribution("PyYAML", "6.0.3", "cd" * 32, "MIT", False),
        Distribution("mesh_config", "1.0.0", "ef" * 32, "Apache-2.0 OR MIT", True),
        Distribution("nohash", "2.0", None, "MIT License; BSD License", False),
    ]


def test_contents_sbom_is_valid_deterministic_and_says_what_was_installed() -> None:
    base = BaseImage("127.0.0.1:5000/shipyard/python-base:3.11", "sha256:" + "12" * 32)
    text = contents_sbom(
        "mesh-agent", "1.0.0", "linux/arm64", _dists(), epoch=EPOCH, of=DIGEST, base=base
    )
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    same = contents_sbom(
        "mesh-agent", "1.0.0", "linux/arm64", _dists()[::-1], epoch=EPOCH, of=DIGEST, base=base
    )
    assert text == same
    doc = json.loads(text)
    assert doc["metadata"]["timestamp"] == "1980-01-01T00:00:00+00:00"
    assert doc["metadata"]["component"]["type"] == "container"
    parts = {c["name"]: c for c in doc["components"]}
    assert parts["PyYAML"]["purl"] == "pkg:pypi/pyyaml@6.0.3"
    assert parts["PyYAML"]["hashes"] == [{"alg": "SHA-256", "content": "cd" * 32}]
    assert parts["PyYAML"]["licenses"] == [{"license": {"id": "MIT"}}]
    assert parts["mesh_config"]["purl"] == "pkg:pypi/mesh-config@1.0.0"
    assert parts["mesh_config"]["licenses"] == [{"expression": "Apache-2.0 OR MIT"}]
    assert parts["mesh_config"]["properties"] == [{"name": FIRST_PARTY, "value": "true"}]
    assert "properties" not in parts["PyYAML"]
    assert "hashes" not in parts["nohash"]
    assert len(parts["nohash"]["licenses"]) == 2
    container = parts[base.name]
    assert container["type"] == "container" and container["version"] == base.digest
    # The serial number follows the content: another wheel hash, another document.
    changed = [Distribution("PyYAML", "6.0.3", "00" * 32, "MIT"), *_dists()[1:]]
    other = contents_sbom(
        "mesh-agent", "1.0.0", "linux/arm64", changed, epoch=EPOCH, of=DIGEST, base=base
    )
    assert json.loads(other)["serialNumber"] != doc["serialNumber"]
    # A zipapp: an application, no base.
    app = json.loads(contents_sbom("m", "1", "any", _dists(), epoch=EPOCH, of="zipapps/m.pyz"))
    assert app["metadata"]["component"]["type"] == "application"
    assert {c["type"] for c in app["components"]} == {"library"}


def test_attachment_is_cosigns_shape_and_deterministic() -> None:
    docs = [("a-amd64.cdx.json", "linux/amd64", b"{}"), ("a-arm64.cdx.json", "linux/arm64", b"[]")]
    made = attachment(docs)
    assert made == attachment(docs)
    manifest = json.loads(made.manifest)
    assert manifest["mediaType"] == OCI_MANIFEST
    assert manifest["config"]["mediaType"] == OCI_CONFIG
    assert [layer["mediaType"] for layer in manifest["layers"]] == [CYCLONEDX_JSON] * 2
    assert [layer["annotations"][PLATFORM_NOTE] for layer in manifest["layers"]] == [
        "linux/amd64",
        "linux/arm64",
    ]
    for layer, (_, _, data) in zip(manifest["layers"], docs, strict=True):
        assert made.blobs[layer["digest"]] == data
    assert made.blobs[manifest["config"]["digest"]]
    assert made.digest == "sha256:" + hashlib.sha256(made.manifest).hexdigest()
    assert attachment(docs[:1]).digest != made.digest
    assert attached_tag(DIGEST, "sbom") == "sha256-" + "ab" * 32 + ".sbom"


def test_sbom_attachments_are_publish_steps_after_the_images_before_wheels_and_tags() -> None:
    one = {"tag": "sha256-p.sbom", "digest": "sha256:s2", "documents": ["sbom/p.cdx.json"]}
    sbom = {"tag": "sha256-d.sbom", "digest": "sha256:s1", "documents": [], "platforms": [one]}
    image = {"kind": "image", "binary": "a", "digest": "sha256:d", "tags": ["1"]}
    staged = {
        "artifacts": [
            {"kind": "wheel", "path": "wheels/a-1-py3-none-any.whl"},
            {**image, "hubs": ["h1/x", "h2/y"], "sbom": sbom},
        ]
    }
    assert publish_steps(parse_release(staged)) == [
        "image h1/x/a@sha256:d",
        "image h2/y/a@sha256:d",
        "sbom h1/x/a:sha256-d.sbom@sha256:s1",
        "sbom h2/y/a:sha256-d.sbom@sha256:s1",
        "sbom h1/x/a:sha256-p.sbom@sha256:s2",
        "sbom h2/y/a:sha256-p.sbom@sha256:s2",
        "wheel a-1-py3-none-any.whl",
        "tag h1/x/a:1@sha256:d",
        "tag h2/y/a:1@sha256:d",
    ]
