"""CycloneDX SBOMs: one per shipped artifact, from what its builder installed into it.

`contents_sbom` describes one zipapp (a universal one once, platform `any`) or
one platform of an image (each variant's own): exactly the distributions the
installer put into it, as the builder recorded them at install time
(`artifacts.Distribution`): name, version, purl (`pkg:pypi/<name>@<version>`),
the sha256 of the wheel installed (left out when the installer's wheel file was
not known), the license its METADATA declares, the repository's own wheels
marked first-party (a `shipyard:first-party` = `true` property), and for an
image its base image (name and digest) as a `container` component. The document
is deterministic: its serial number derives from its content, its timestamp is
the build clock. `attachment` builds the cosign-style OCI manifest that carries
SBOMs next to an image (`sha256-<hex>.sbom`).

`sbom_json` is the older binary-level document, kept for a binary whose
contents are not known (only a wheel, or an image built from a Dockerfile). The
set comes from the artifacts' metadata (`installed_dependencies`): what the
zipapp and image builders installed for each platform, the binary's own
distribution left out. A binary whose builders installed nothing that is known
(only a wheel, or an image built from a Dockerfile) gets its wheel's
Requires-Dist resolved with `uv pip compile`, never against the environment
shipyard itself runs in. The document is deterministic: its serial number
derives from the name and version, its timestamp is the build clock.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.parser import BytesParser
from importlib import metadata
from pathlib import Path
from typing import Any

from cyclonedx.contrib.license.factories import LicenseFactory
from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from shipyard.artifacts import Artifact, Distribution
from shipyard.errors import BuildError

__all__ = [
    "FIRST_PARTY",
    "BaseImage",
    "contents_sbom",
    "installed_dependencies",
    "resolve_requirements",
    "sbom_json",
    "wheel_requirements",
]

# The property that marks a component as one of the repository's own wheels.
FIRST_PARTY = "shipyard:first-party"
# Layer annotations of an attached SBOM: its file name and the platform it describes.


def wheel_requirements(wheel: Path) -> list[Requirement]:
    """The Requires-Dist of a wheel whose markers hold here, without extras."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = BytesParser().parsebytes(archive.read(name))
    reqs = [Requirement(text) for text in message.get_all("Requires-Dist") or []]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


def _uv_compile(reqs: Sequence[Requirement], python: str) -> dict[str, str]:
    from shipyard.process import installer_env  # here: promotion never loads the engine

    uv = shutil.which("uv")
    command = [uv] if uv else [sys.executable, "-m", "uv"]
    command += ["pip", "compile", "--quiet", "--no-header", "--no-annotate"]
    command += ["--python-version", python, "-"]
    done = subprocess.run(
        command,
        input="\n".join(str(r) for r in reqs),
        capture_output=True,
        text=True,
        env=installer_env(os.environ),
        cwd=tempfile.gettempdir(),
        check=False,
    )
    if done.returncode != 0:
        raise BuildError("sbom", f"uv pip compile failed: {done.stderr.strip()[-400:]}")
    pins: dict[str, str] = {}
    for line in done.stdout.splitlines():
        name, sep, version = line.strip().partition("==")
        if sep:
            pins[str(canonicalize_name(name))] = version.split(";")[0].strip()
    return pins


def resolve_requirements(
    reqs: Sequence[Requirement], *, paths: Sequence[str] | None = None, python: str = "3.11"
) -> dict[str, str]:
    """Name -> version of the transitive closure of `reqs`.

    Installed distributions under `paths` (a resolved site folder; default none)
    answer first; when one is missing or does not satisfy its specifier, the whole
    set goes to uv.
    """
    found: dict[str, str] = {}
    todo = list(reqs)
    while todo:
        req = todo.pop()
        key = str(canonicalize_name(req.name))
        if key in found:
            continue
        dists = list(metadata.distributions(name=req.name, path=list(paths))) if paths else []
        if not dists or (req.specifier and dists[0].version not in req.specifier):
            return _uv_compile(reqs, python)
        found[key] = dists[0].version
        for text in dists[0].requires or []:
            sub = Requirement(text)
            envs = [{"extra": e} for e in (*req.extras, "")]
            if sub.marker is None or any(sub.marker.evaluate(env) for env in envs):
                todo.append(sub)
    return dict(sorted(found.items()))


def installed_dependencies(
    artifacts: Iterable[Artifact], own: str | None
) -> list[tuple[str, str]] | None:
    """(name, version) of every distribution the builders of `artifacts` installed,
    on any platform, without the distribution `own`; None if none of them knows."""
    known = [a.metadata for a in artifacts if a.metadata.installed is not None]
    if not known:
        return None
    skip = canonicalize_name(own) if own else None
    found = {
        (str(canonicalize_name(d.name)), d.version)
        for m in known
        for d in m.distributions()
        if canonicalize_name(d.name) != skip
    }
    return sorted(found)


def sbom_json(
    name: str,
    version: str,
    dependencies: Mapping[str, str] | Iterable[tuple[str, str]],
    *,
    epoch: int,
    kind: str = "application",
) -> str:
    """The CycloneDX 1.6 JSON document for `name` `version` and its dependencies
    (name -> version, or (name, version) pairs when a name has several versions)."""
    root = Component(
        name=name,
        version=version,
        type=ComponentType(kind),
        bom_ref=f"pkg:pypi/{name}@{version}",
        purl=PackageURL("pypi", None, name, version),
    )
    bom = Bom(serial_number=uuid.uuid5(uuid.NAMESPACE_URL, f"shipyard:{name}@{version}"))
    bom.metadata.component = root
    bom.metadata.timestamp = datetime.fromtimestamp(epoch, UTC)
    parts = []
    pairs = dependencies.items() if isinstance(dependencies, Mapping) else dependencies
    for dep, dep_version in sorted(set(pairs)):
        purl = PackageURL("pypi", None, dep, dep_version)
        part = Component(name=dep, version=dep_version, bom_ref=purl.to_string(), purl=purl)
        bom.components.add(part)
        parts.append(part)
    bom.register_dependency(root, parts)
    return str(JsonV1Dot6(bom).output_as_string(indent=2)) + "\n"


@dataclass(frozen=True)
class BaseImage:
    """An image's base: its reference as the build named it, and its digest ("" unknown)."""

    name: str
    digest: str


def _purl_name(name: str) -> str:
    return str(canonicalize_name(name))


def _licenses(text: str | None) -> list[Any]:
    if not text:
        return []
    factory = LicenseFactory()
    made = factory.make_from_string(text)
    if type(made).__name__ == "LicenseExpression" or ";" not in text:
        return [made]
    return [factory.make_from_string(part.strip()) for part in text.split(";") if part.strip()]


def _component(dist: Distribution) -> Component:
    purl = PackageURL("pypi", None, _purl_name(dist.name), dist.version)
    return Component(
        name=dist.name,
        version=dist.version,
        type=ComponentType.LIBRARY,
        bom_ref=purl.to_string(),
        purl=purl,
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=dist.sha256)] if dist.sha256 else [],
        licenses=_licenses(dist.license),
        properties=[Property(name=FIRST_PARTY, value="true")] if dist.first_party else [],
    )


def _base_component(base: BaseImage) -> Component:
    algorithm, _, hexpart = base.digest.partition(":")
    hashes = [HashType(alg=HashAlgorithm.SHA_256, content=hexpart)] if algorithm == "sha256" else []
    purl = None
    # A registry reference (host/path[:tag]) gets an OCI purl; a local layout does not.
    if base.digest and "://" not in base.name and not base.name.startswith("oci-layout:"):
        repository = base.name.split("@", 1)[0]
        last = repository.rsplit("/", 1)[-1]
        if ":" in last:
            repository = repository[: -len(last)] + last.split(":", 1)[0]
        purl = PackageURL(
            "oci",
            None,
            repository.rsplit("/", 1)[-1].lower(),
            base.digest,
            qualifiers={"repository_url": repository},
        )
    return Component(
        name=base.name,
        version=base.digest or None,
        type=ComponentType.CONTAINER,
        bom_ref=f"base-image:{base.name}@{base.digest}",
        hashes=hashes,
        purl=purl,
        properties=[Property(name="shipyard:base-image", value="true")],
    )


def contents_sbom(
    name: str,
    version: str,
    platform: str,
    distributions: Iterable[Distribution],
    *,
    epoch: int,
    of: str,
    base: BaseImage | None = None,
) -> str:
    """The CycloneDX 1.6 JSON document of one artifact: `name` `version` for
    `platform` (`any`: a universal zipapp), described by `of` (its path or digest),
    listing each of `distributions` once and, for an image, its `base`."""
    dists = {(_purl_name(d.name), d.version): d for d in distributions}
    ordered = [dists[key] for key in sorted(dists)]
    content = json.dumps(
        [
            name,
            version,
            platform,
            of,
            [[d.name, d.version, d.sha256, d.license, d.first_party] for d in ordered],
            [base.name, base.digest] if base else None,
        ]
    )
    serial = uuid.uuid5(
        uuid.NAMESPACE_URL, "shipyard:" + hashlib.sha256(content.encode()).hexdigest()
    )
    root = Component(
        name=name,
        version=version,
        type=ComponentType.CONTAINER if base is not None else ComponentType.APPLICATION,
        bom_ref=f"shipyard:{name}@{version}:{platform}",
        properties=[
            Property(name="shipyard:platform", value=platform),
            Property(name="shipyard:of", value=of),
        ],
    )
    bom = Bom(serial_number=serial)
    bom.metadata.component = root
    bom.metadata.timestamp = datetime.fromtimestamp(epoch, UTC)
    parts = [_component(d) for d in ordered]
    if base is not None:
        parts.append(_base_component(base))
    for part in parts:
        bom.components.add(part)
    bom.register_dependency(root, parts)
    return str(JsonV1Dot6(bom).output_as_string(indent=2)) + "\n"
