"""The CLI imports only what a command needs.

`check`, `plan`, `schema` and `--version` run without the builders, the OCI and
HTTP code, the release stages, docker or requests: they start fast and keep
working where a heavy module cannot load (issue 13: shipyard's own zipapp).
A no-op build (everything cached) imports only what deciding "cached" takes
(issue 28): no release, SBOM, signing, HTTP, registry or docker code, no manifest
validator for an unchanged manifest, no rich off a terminal.
Each command runs in a fresh interpreter, which then lists what it imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiny import OFFLINE, make_repo, shipyard

REPO = Path(__file__).resolve().parents[3]
HEAVY = (
    "shipyard.builders",
    "shipyard.oci",
    "shipyard._http",
    "shipyard.release",
    "shipyard.engine.cache.reapi",  # the remote cache clients load for --cache alone
    "shipyard.engine.cache.http",
)
HEAVY_TOP = ("docker", "requests", "grpc", "google", "buildgrid")  # google: protobuf
# Pure parsing the manifest validator shares with the key and the loader (image.base,
# issue 13): no I/O, no HTTP, no credentials.
LIGHT = {
    "shipyard.oci",
    "shipyard.oci.basespec",
    "shipyard.oci.mediatypes",
    "shipyard.oci.model",
    "shipyard.oci.remote",
    "shipyard.oci.remote.reference",
}
RUNNER = """
import json, sys
from shipyard.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:  # --version exits from the parser
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def modules(
    argv: list[str], cache: Path, cwd: Path = REPO, env: dict[str, str] | None = None
) -> tuple[int, list[str], subprocess.CompletedProcess[str]]:
    """Run `shipyard ARGV` in a fresh interpreter: exit code, every module it had
    imported at the end, and the run."""
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "SHIPYARD_CACHE_DIR": str(cache), "NO_COLOR": "1", **(env or {})},
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], report["modules"], done


def imported(argv: list[str], cache: Path) -> tuple[int, list[str], str]:
    """Run `shipyard ARGV` in a fresh interpreter: exit code, heavy modules, stdout."""
    code, names, done = modules(argv, cache)
    heavy = [
        m for m in names if (m.startswith(HEAVY) and m not in LIGHT) or m.split(".")[0] in HEAVY_TOP
    ]
    return code, heavy, done.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["check"],
        ["plan"],
        ["plan", "--json", "--target=all"],
        ["schema"],
        ["--version"],
        ["--tool-version"],
        ["build", "--dry-run"],
        ["graph", "--format=html"],
    ],
    ids=" ".join,
)
def test_light_commands_load_no_builder_oci_http_or_release_code(
    argv: list[str], tmp_path: Path
) -> None:
    # This repository's manifest: image outputs, every kind of binary, an oci-layout base.
    manifest = ["-f", str(REPO / "binaries.yaml")] if argv[0].isalpha() else []
    cold = imported([*manifest, *argv], tmp_path / "cache")
    warm = imported([*manifest, *argv], tmp_path / "cache")  # the manifest from the cache
    for code, heavy, out in (cold, warm):
        assert code == 0, out
        assert heavy == [], f"shipyard {' '.join(argv)} imported {heavy}"
    assert cold[2] == warm[2]


# What a no-op build of wheels and zipapps may import besides the standard library:
# shipyard's packages (a prefix allows the package and its submodules) and two
# third-party distributions. Anything else fails the test; these fail it with a name.
NOOP_ALLOWED = (
    "shipyard",  # the package itself (its __init__: the version, the errors)
    "shipyard._environ",  # the table of environment variables: re and dataclasses only
    "shipyard._fs",
    "shipyard._json",
    "shipyard._toml",
    "shipyard._units",
    "shipyard.artifacts",
    "shipyard.builders",  # the package; its kinds below
    "shipyard.builders.kinds",
    "shipyard.builders.locks",
    "shipyard.builders.wheel",
    "shipyard.builders.zipapp",
    "shipyard.cli",
    "shipyard.dist",
    "shipyard.engine",
    "shipyard.errors",
    "shipyard.files",
    "shipyard.git",
    "shipyard.manifest",
    "shipyard.oci",  # the package; the image key's pure parts below
    "shipyard.oci.basespec",
    "shipyard.oci.keys",
    "shipyard.process",
    "shipyard.stamp",
    "shipyard.workspace",
    "packaging",
    "platformdirs",
    "tomli",  # compiled: reads uv.lock 3x faster than tomllib
)
NOOP_FORBIDDEN = (
    "shipyard.release",
    "shipyard.oci.remote",
    "shipyard.oci.registry",
    "shipyard._http",
    "shipyard.engine.cache.remote",
    "shipyard.engine.cache.endpoint",
    "shipyard.builders.image",
    "shipyard.manifest._validate",
    "shipyard.manifest._yaml",
    "cyclonedx",
    "requests",
    "urllib3",
    "docker",
    "rich",
    "pydantic",  # the manifest's validator
    "jsonschema",
    "yaml",
    "cryptography",
    "ssl",
    "http",
    "grpc",  # a shared cache's clients load only when --cache names one
    "google",
)
# The binary, appended to make_repo's manifest (which lists none).
BUDGETS = (
    '  app: {source: tiny, entrypoint: "tiny:main", outputs: [wheel, zipapp],\n'
    "        size: {wheel: {max: 1kB}, zipapp: {max: 1kB}}}\n"
)


def _listed(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(f"{p}.") for p in prefixes)


def _start_modules() -> set[str]:
    """What the interpreter imports before any code of ours runs (site, .pth hooks)."""
    done = subprocess.run(
        [sys.executable, "-c", "import json, sys; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(json.loads(done.stdout))


def test_a_no_op_build_imports_only_what_deciding_cached_takes(tmp_path: Path) -> None:
    # One binary, a wheel and a zipapp, both over a size budget: the build warns (the
    # warning imported the whole release pipeline once, issue 28).
    root = make_repo(tmp_path / "repo", {})
    with (root / "binaries.yaml").open("a") as manifest:
        manifest.write(BUDGETS)
    git = ["git", "-C", str(root), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "commit", "-qam", "budgets"], check=True)
    cache = tmp_path / "cache"
    built = shipyard(root, "build", cache=cache)
    assert built.returncode == 0, built.stderr

    argv = ["build", "--target=all", "--output=wheel", "--output=zipapp"]
    # CI empty: stderr being a pipe, not CI, is what keeps rich out.
    code, names, noop = modules(argv, cache, cwd=root, env={"CI": "", **OFFLINE})
    assert code == 0, noop.stderr
    report = json.loads((root / "dist" / "report.json").read_text())
    assert {a["status"] for a in report["actions"]} == {"cached"}
    assert noop.stderr.count("warning: app ") == 2  # the budgets were still checked

    forbidden = [m for m in names if _listed(m, NOOP_FORBIDDEN)]
    assert forbidden == [], f"a no-op build imported {forbidden}"
    stdlib, start = sys.stdlib_module_names, _start_modules()
    unexpected = [
        m
        for m in names
        if m not in start
        and m.split(".")[0] not in stdlib
        and not _listed(m, NOOP_ALLOWED)
        and not m.endswith("__mypyc")  # the runtime of a compiled module allowed above
    ]
    assert unexpected == [], f"a no-op build imported {unexpected}: allow them, or import less"
