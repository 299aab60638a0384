"""The CLI imports only what a command needs.

`check`, `plan`, `schema` and `--version` run without the builders, the OCI and
HTTP code, the release stages, docker or requests: they start fast and keep
working where a heavy module cannot load (issue 13: shipyard's own zipapp).
Each command runs in a fresh interpreter, which then lists what it imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
HEAVY = ("shipyard.builders", "shipyard.oci", "shipyard._http", "shipyard.release")
HEAVY_TOP = ("docker", "requests")
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


def imported(argv: list[str], cache: Path) -> tuple[int, list[str], str]:
    """Run `shipyard ARGV` in a fresh interpreter: exit code, heavy modules, stdout."""
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "SHIPYARD_CACHE_DIR": str(cache), "NO_COLOR": "1"},
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    heavy = [
        m
        for m in report["modules"]
        if (m.startswith(HEAVY) and m not in LIGHT) or m.split(".")[0] in HEAVY_TOP
    ]
    return report["code"], heavy, done.stdout


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
