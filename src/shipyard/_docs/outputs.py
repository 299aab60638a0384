"""The exit codes page and the report.json and release.json pages, from their types.

Exit codes come from the `exit_code` of shipyard's exception classes; the fields of
release.json from a staged release's own `to_json` (a small one made here, typed as
staging makes them), those of report.json from the keys `report_json` and the
types it calls write. Each field's meaning is in `REPORT_FIELDS`/`RELEASE_FIELDS`:
a field the code writes without a meaning there fails the generator (and so
`nox -s docs` and the documentation-coverage test).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

from shipyard import errors
from shipyard._docs._markdown import code, table
from shipyard.artifacts import Artifact
from shipyard.engine import report
from shipyard.engine.cache.policy import RemoteSummary
from shipyard.engine.plan import Action
from shipyard.oci.mediatypes import OCI_INDEX
from shipyard.release.staged import ImageSbom, PlatformEntry, StagedFile, StagedImage, StagedRelease

__all__ = [
    "RELEASE_FIELDS",
    "REPORT_FIELDS",
    "exit_codes_page",
    "release_fields",
    "release_page",
    "report_fields",
    "report_page",
    "undocumented",
]

REPORT_FIELDS: dict[str, str] = {
    "project": "project.name of the manifest",
    "version": "the version stamped into this build's outputs",
    "revision": "the git commit the build ran on",
    "dirty": "true when the work tree had changes",
    "source_date_epoch": "the timestamp written into every output (SOURCE_DATE_EPOCH)",
    "actions": "one entry per action of the plan, in the order they finished",
    "cache": "what the build did with its caches",
    "cache.remote": "the shared cache (`--cache=URL`), null without one",
    "cache.remote.url": "the cache URL, without credentials",
    "cache.remote.mode": "read-write, read-only or write-only (`--cache-mode`)",
    "cache.remote.hits": "actions restored from the shared cache",
    "cache.remote.misses": "actions it did not have (or had in a form refused)",
    "cache.remote.stored": "actions written to it",
    "cache.remote.calls": "requests sent, retries included",
    "cache.remote.bytes_down": "payload bytes received",
    "cache.remote.bytes_up": "payload bytes sent",
    "cache.remote.disabled": "why the build went on without it (down, slow), else null",
    "cache.remote.read_only_server": "true when the server took no writes",
    "actions[].id": "the action's id, e.g. wheel:examples/mesh/libs/api",
    "actions[].kind": "wheel, zipapp, image, stage, ...",
    "actions[].binaries": "the binaries the action serves",
    "actions[].source": "the folder it builds, relative to the repository",
    "actions[].platforms": "the platforms it builds for",
    "actions[].deps": "ids of the actions it needs first",
    "actions[].project": "a test stage's project",
    "actions[].stage": "a test stage's name",
    "actions[].pythons": "the target Pythons of the action",
    "actions[].version": "the version stamped into this action's outputs",
    "actions[].status": "built, cached, failed or skipped",
    "actions[].reason": "why it was built (the input that changed) or skipped",
    "actions[].duration": "seconds this build spent on it",
    "actions[].build_seconds": "seconds its last real build took (for scheduling)",
    "actions[].inputs": "the hash of everything the action reads: its cache key",
    "actions[].outputs": "the files it made",
    "actions[].outputs[].path": "relative to the repository when inside it",
    "actions[].outputs[].sha256": "the file's sha256",
    "actions[].outputs[].size": "bytes",
    "actions[].outputs[].kind": "wheel, zipapp, image, sbom, ...",
    "actions[].outputs[].binary": "the binary it belongs to",
    "actions[].outputs[].platform": "its platform, any for a pure wheel",
    "actions[].outputs[].metadata": "what its builder knows: installed distributions, image facts",
    "actions[].log": "the action's log, relative to the repository",
    "skips": "binaries the selection reached that had nothing to build",
    "skips[].binary": "the binary",
    "skips[].reason": "why nothing was left to build",
}

RELEASE_FIELDS: dict[str, str] = {
    "schema": "the format version of the file (1)",
    "project": "project.name",
    "version": "the released version",
    "tag": "the git tag released, null for a snapshot",
    "revision": "the git commit released",
    "snapshot": "true for `release --snapshot`: staged, never published",
    "build": "the build identity every output carries",
    "artifacts": "every staged file and image, in publishing order",
    "artifacts[].kind": "wheel, zipapp, archive, sbom, image, ...",
    "artifacts[].binary": "the binary it ships (absent for a wheel, shared by all)",
    "artifacts[].platform": "its platform (any when it has none); an image's list of them",
    "artifacts[].of": "what an SBOM describes: the file's path",
    "artifacts[].image": "the image index digest an SBOM's platform manifest belongs to",
    "artifacts[].variant": "the image variant's name (tags suffixed -<variant>)",
    "artifacts[].collapsed": "the variant is the default image itself (same digest)",
    "artifacts[].path": "relative to dist/release/<version>/ (an image: its OCI layout folder)",
    "artifacts[].sha256": "the file's sha256",
    "artifacts[].size": "bytes (an image: its index's)",
    "artifacts[].digest": "the image's index (or single manifest) digest",
    "artifacts[].media_type": "the media type of that index or manifest",
    "artifacts[].manifests": "each platform's manifest",
    "artifacts[].manifests[].platform": "os/arch[/variant]",
    "artifacts[].manifests[].digest": "the platform manifest's digest",
    "artifacts[].manifests[].size": "its size in bytes",
    "artifacts[].hubs": "where the image is pushed",
    "artifacts[].tags": "its tags, the version tag first",
    "artifacts[].sbom": "the SBOM attached to the image index",
    "artifacts[].sbom.tag": "the tag the attachment is pushed under",
    "artifacts[].sbom.digest": "the attachment's digest",
    "artifacts[].sbom.documents": "the SBOM files it carries",
    "artifacts[].sbom.references": "what it refers to",
    "artifacts[].sbom.platforms": "each platform manifest's own SBOM attachment",
    "artifacts[].sbom.platforms[].platform": "the platform",
    "artifacts[].sbom.platforms[].of": "the platform manifest's digest",
    "artifacts[].sbom.platforms[].tag": "the tag it is pushed under",
    "artifacts[].sbom.platforms[].digest": "its digest",
    "artifacts[].sbom.platforms[].documents": "the SBOM files it carries",
    "artifacts[].sbom.platforms[].references": "what it refers to",
}


def _json_paths(value: object, path: str = "") -> Iterator[tuple[str, str]]:
    """(dotted path, JSON type) of every key under `value`, lists as `[]`."""
    if isinstance(value, dict):
        for key, sub in value.items():
            here = f"{path}.{key}" if path else str(key)
            yield here, _json_type(sub)
            if key != "build":
                yield from _json_paths(sub, here)
    elif isinstance(value, list):
        for item in value:
            yield from _json_paths(item, path + "[]")


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "null" if value is None else "object"


def _example_release() -> StagedRelease:
    """A staged release with one of each kind of entry, as staging types them."""
    sbom = ImageSbom("sha256-a.sbom", "sha256:b", ("sbom.cdx.json",), ("sha256:c",))
    image = StagedImage(
        "cli",
        "images/cli",
        "sha256:a",
        OCI_INDEX,
        1,
        ("linux/amd64",),
        (PlatformEntry("linux/amd64", "sha256:c", 1),),
        ("registry.example/acme",),
        ("1.0.0",),
        variant="debug",
        sbom=sbom,
        platform_sboms=(ImageSbom("t", "d", (), (), "linux/amd64", "sha256:c"),),
    )
    sbom_file = StagedFile("sbom", "a.cdx.json", "0" * 64, 1, binary="cli", of="a", image="b")
    return StagedRelease("acme", "1.0.0", "v1.0.0", "0" * 40, False, {}, (sbom_file, image), 1)


def release_fields() -> list[tuple[str, str]]:
    """(path, JSON type) of every field release.json can hold, first occurrence each."""
    seen: dict[str, str] = {}
    for path, kind in _json_paths(_example_release().to_json()):
        seen.setdefault(path, kind)
    return list(seen.items())


def _dict_keys(function: Callable[..., Any]) -> Iterator[tuple[str, ast.expr]]:
    """The string keys of the dict literals `function` builds, with their values."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    yield key.value, value
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            index = node.slice
            if isinstance(index, ast.Constant) and isinstance(index.value, str):
                yield index.value, node


def report_fields() -> list[str]:
    """Every field report.json can hold, read off the code that writes it."""
    found: list[str] = []
    for key, value in _dict_keys(report.report_json):
        if key in ("binary", "reason") and "skips" in found:
            found.append(f"skips[].{key}")
        elif (
            key in ("project", "version", "revision", "dirty", "source_date_epoch")
            and ("actions" not in found)
        ) or key == "cache":
            found.append(key)
        elif key == "remote" and "cache" in found:
            found.append("cache.remote")
            found += [f"cache.remote.{f.name}" for f in dataclasses.fields(RemoteSummary)]
        elif key in ("actions", "skips"):
            found.append(key)
            if key == "actions":
                found += [f"actions[].{k}" for k, _ in _dict_keys(Action.to_json)]
        else:
            found.append(f"actions[].{key}")
            if key == "outputs":
                found += [f"actions[].outputs[].{k}" for k, _ in _dict_keys(Artifact.to_json)]
                found += [f"actions[].outputs[].{k}" for k, _ in _dict_keys(Artifact.describe)]
        del value
    return list(dict.fromkeys(found))


def undocumented() -> list[str]:
    """Fields report.json or release.json may hold that have no meaning written here."""
    missing = [f"report.json: {f}" for f in report_fields() if f not in REPORT_FIELDS]
    missing += [f"release.json: {p}" for p, _ in release_fields() if p not in RELEASE_FIELDS]
    return missing


def _classes() -> list[type[errors.ShipyardError]]:
    found: list[type[errors.ShipyardError]] = []
    todo: list[type[errors.ShipyardError]] = [errors.ShipyardError]
    while todo:
        cls = todo.pop(0)
        if cls in found:
            continue  # a class with two error bases
        found.append(cls)
        todo += sorted(cls.__subclasses__(), key=lambda c: (c.__module__, c.__name__))
    return found


def _import_all() -> None:
    """Import every module of shipyard, so each error class is a known subclass."""
    import importlib
    import pkgutil

    import shipyard

    for info in pkgutil.walk_packages(shipyard.__path__, "shipyard."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as missing:  # an optional tool's glue (shipyard.nox)
            if (missing.name or "").startswith("shipyard"):
                raise


def _code(row: tuple[int, str, str]) -> int:
    return row[0]


def exit_codes_page() -> str:
    """docs/reference/exit-codes.md."""
    _import_all()

    rows: list[tuple[int, str, str]] = [(0, "", "success")]
    for cls in _classes():
        doc = (cls.__doc__ or "").strip().split("\n\n")[0]
        rows.append((cls.exit_code, code(f"{cls.__module__}.{cls.__name__}"), doc))
    rows.append((130, "", "interrupted (Ctrl-C); what was finished stays in the cache"))
    rows.sort(key=_code)
    return "\n".join(
        [
            "# Exit codes\n",
            "Generated from the `exit_code` of every error class shipyard raises on purpose "
            "(`shipyard.errors` and its subclasses). Anything else is a bug: it prints a "
            "traceback and exits 1.\n",
            "| code | meaning |\n|---|---|\n| 0 | success |\n| 1 | a build step, test "
            "stage, push, release or promotion failed; the message names the action, the "
            "command and the log |\n| 2 | bad input: manifest, flags or environment; the "
            "message names `file:line:col` or the flag and the fix |\n| 130 | interrupted |\n",
            "## By error class\n",
            table(("code", "class", "meaning"), rows),
        ]
    )


def report_page() -> str:
    """docs/reference/report-json.md."""
    rows = [(code(f), REPORT_FIELDS.get(f, "")) for f in report_fields()]
    return (
        "# dist/report.json\n\nEvery `shipyard build` writes it: what each action was, "
        "whether it was built or came from the cache, and what it made. Generated from the "
        "code that writes it (`shipyard.engine.report`).\n\n" + table(("field", "meaning"), rows)
    )


def release_page() -> str:
    """docs/reference/release-json.md."""
    rows = [(code(p), t, RELEASE_FIELDS.get(p, "")) for p, t in release_fields()]
    return (
        "# release.json\n\n`shipyard release` stages everything it will publish in "
        "`dist/release/<version>/` and describes it in release.json, which the publish, "
        "verify and promote steps read back. Generated from its type "
        "(`shipyard.release.staged.StagedRelease`).\n\n"
        + table(("field", "JSON type", "meaning"), rows)
    )
