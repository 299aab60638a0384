"""Documentation coverage: a flag, a manifest key, a SHIPYARD_* variable or a field of
report.json/release.json added without its documentation fails here.

The site's references are generated from these same sources (shipyard._docs), so
"documented" means: a CLI argument has help text, a manifest key a description (its
own or its model's), every `SHIPYARD_*` name in a string under src/ a row in
shipyard._environ.VARIABLES, and every output field a meaning in shipyard._docs.outputs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from shipyard._docs import cli, environ, manifest, outputs
from shipyard._environ import VARIABLES

REPO = Path(__file__).resolve().parents[3]


def test_every_cli_argument_has_help_text() -> None:
    missing = cli.undocumented()
    assert missing == [], (
        f"arguments without help= (the CLI reference is generated from it): {missing}"
    )


def test_every_manifest_key_has_a_description() -> None:
    missing = manifest.undocumented()
    assert missing == [], (
        f"manifest keys without Field(description=...) in manifest/_model.py: {missing}"
    )


def test_every_shipyard_variable_in_src_is_in_the_table() -> None:
    missing = environ.undocumented()
    assert missing == [], (
        f"SHIPYARD_* names with no row in src/shipyard/_environ.py VARIABLES: {missing}"
    )


def test_every_report_and_release_field_has_a_meaning() -> None:
    assert outputs.undocumented() == []


def test_every_variable_row_says_what_it_does_and_where_it_is_read() -> None:
    for variable in VARIABLES:
        assert variable.name.startswith("SHIPYARD_"), variable
        assert variable.meaning.strip(), variable.name
        for where in variable.read_in:
            candidates = (REPO / "src" / "shipyard" / where, REPO / where)
            assert any(p.exists() for p in candidates), f"{variable.name}: no {where}"


# -- the checks themselves catch what they are for --------------------------------


def test_a_flag_added_without_help_is_caught() -> None:
    top = cli.parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    sub.choices["build"].add_argument("--undocumented-flag", action="store_true")
    assert cli.undocumented(top) == ["build --undocumented-flag"]


def test_a_key_without_description_is_caught() -> None:
    found = manifest.all_keys()
    bare = manifest.Key("binaries.<name>.new_key", "string", False, "", "", "", "BinaryDoc")
    assert manifest.undocumented([*found, bare]) == ["binaries.<name>.new_key"]


def test_a_variable_read_without_a_row_is_caught(tmp_path: Path) -> None:
    package = tmp_path / "src" / "shipyard"
    package.mkdir(parents=True)
    (package / "new.py").write_text(
        '__all__ = ["SHIPYARD_CONSTANT"]\n'
        "import os\n"
        'SHIPYARD_CONSTANT = "a media type, not a variable"\n'
        'depth = os.environ.get("SHIPYARD_NEW_DEPTH", "3")\n'
        'user = os.environ.get(f"SHIPYARD_REGISTRY_{host}_USER")\n'
        'timeout = os.environ.get("SHIPYARD_HTTP_TIMEOUT")\n'
    )
    assert environ.undocumented(tmp_path / "src") == ["SHIPYARD_NEW_DEPTH (src/shipyard/new.py:4)"]
