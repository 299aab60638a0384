"""CycloneDX SBOMs: one per binary, over the distributions its builders installed.

The set comes from the artifacts' metadata (`installed_dependencies`): what the
zipapp and image builders installed for each platform, the binary's own
distribution left out. A binary whose builders installed nothing that is known
(only a wheel, or an image built from a Dockerfile) gets its wheel's
Requires-Dist resolved with `uv pip compile`, never against the environment
shipyard itself runs in. The document is deterministic: its serial number
derives from the name and version, its timestamp is the build clock.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from email.parser import BytesParser
from importlib import metadata
from pathlib import Path

from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from shipyard.artifacts import Artifact
from shipyard.errors import BuildError

__all__ = [
    "installed_dependencies",
    "resolve_requirements",
    "sbom_json",
    "wheel_requirements",
]


def wheel_requirements(wheel: Path) -> list[Requirement]:
    """The Requires-Dist of a wheel whose markers hold here, without extras."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = BytesParser().parsebytes(archive.read(name))
    reqs = [Requirement(text) for text in message.get_all("Requires-Dist") or []]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


def _uv_compile(reqs: Sequence[Requirement], python: str) -> dict[str, str]:
    uv = shutil.which("uv")
    command = [uv] if uv else [sys.executable, "-m", "uv"]
    command += ["pip", "compile", "--quiet", "--no-header", "--no-annotate"]
    command += ["--python-version", python, "-"]
    done = subprocess.run(
        command,
        input="\n".join(str(r) for r in reqs),
        capture_output=True,
        text=True,
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
