"""CycloneDX SBOMs: one per binary, over the binary's resolved dependency set.

The set is the wheel's Requires-Dist, resolved transitively against installed
distributions' metadata (the environment the release runs in, or a resolved
site-packages folder); what is not installed there is resolved with
`uv pip compile`. The document is deterministic: its serial number derives from
the name and version, its timestamp is the build clock.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Sequence
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

from shipyard.errors import BuildError

__all__ = ["resolve_requirements", "sbom_json", "wheel_requirements"]


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

    Installed distributions under `paths` (default sys.path) answer first; when one
    is missing or does not satisfy its specifier, the whole set goes to uv.
    """
    found: dict[str, str] = {}
    todo = list(reqs)
    while todo:
        req = todo.pop()
        key = str(canonicalize_name(req.name))
        if key in found:
            continue
        dists = list(metadata.distributions(name=req.name, path=list(paths or sys.path)))
        if not dists or (req.specifier and dists[0].version not in req.specifier):
            return _uv_compile(reqs, python)
        found[key] = dists[0].version
        for text in dists[0].requires or []:
            sub = Requirement(text)
            envs = [{"extra": e} for e in (*req.extras, "")]
            if sub.marker is None or any(sub.marker.evaluate(env) for env in envs):
                todo.append(sub)
    return dict(sorted(found.items()))


def sbom_json(
    name: str, version: str, dependencies: dict[str, str], *, epoch: int, kind: str = "application"
) -> str:
    """The CycloneDX 1.6 JSON document for `name` `version` and its dependencies."""
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
    for dep, dep_version in sorted(dependencies.items()):
        purl = PackageURL("pypi", None, dep, dep_version)
        part = Component(name=dep, version=dep_version, bom_ref=purl.to_string(), purl=purl)
        bom.components.add(part)
        parts.append(part)
    bom.register_dependency(root, parts)
    return str(JsonV1Dot6(bom).output_as_string(indent=2)) + "\n"
