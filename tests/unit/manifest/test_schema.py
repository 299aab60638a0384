"""The JSON Schema: checked in, valid draft 2020-12, and in step with the loader.

The schema sees the manifest as written (before `${}` expansion). Over the fixtures in
tests/manifests/ it must accept the repository's binaries.yaml and every good case, reject
each bad case whose expect.json says `"schema_rejects": true` (structural badness: unknown
keys, wrong types, bad enum values or patterns, missing keys) and accept each one that says
`false` (badness only the loader can see: references, paths, the environment). `null` means
the comparison does not apply (the file is not YAML that yaml.safe_load can read, or the
schema would see the unexpanded text).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator  # type: ignore[import-untyped,unused-ignore]

from shipyard.cli import main
from shipyard.manifest import json_schema

REPO = Path(__file__).resolve().parents[3]
MANIFESTS = REPO / "tests" / "manifests"
SCHEMA_FILE = REPO / "binaries.schema.json"
REGENERATE = "regenerate it with `shipyard schema > binaries.schema.json`"


def _validator() -> Any:
    return Draft202012Validator(json_schema())


def _document(case: Path) -> Any:
    return yaml.safe_load((case / "binaries.yaml").read_text(encoding="utf-8"))


def _errors(document: Any) -> list[str]:
    return [
        f"{'/'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in _validator().iter_errors(document)
    ]


def test_checked_in_schema_is_current() -> None:
    assert SCHEMA_FILE.is_file(), f"{SCHEMA_FILE.name} is missing; {REGENERATE}"
    checked_in = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert checked_in == json_schema(), f"{SCHEMA_FILE.name} is out of date; {REGENERATE}"


def test_cli_prints_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == json_schema()


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    schema = json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)
    assert set(schema["required"]) == {"schema", "project", "binaries"}
    assert schema["additionalProperties"] is False


def test_repository_manifest_is_valid() -> None:
    document = yaml.safe_load((REPO / "binaries.yaml").read_text(encoding="utf-8"))
    assert _errors(document) == []


GOOD = sorted(p for p in MANIFESTS.iterdir() if p.is_dir() and p.name.startswith("good-"))


@pytest.mark.parametrize("case", GOOD, ids=[p.name for p in GOOD])
def test_good_case_is_valid(case: Path) -> None:
    assert _errors(_document(case)) == []


def _bad_params() -> list[Any]:
    params = []
    for case in sorted(MANIFESTS.iterdir()):
        if not case.is_dir() or case.name.startswith("good-"):
            continue
        expect = json.loads((case / "expect.json").read_text(encoding="utf-8"))
        if expect["schema_rejects"] is None:
            continue
        reason = expect.get("xfail", {}).get("schema")
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(case, bool(expect["schema_rejects"]), marks=marks, id=case.name))
    return params


BAD = _bad_params()


def test_the_schema_rejects_enough_bad_cases() -> None:
    assert sum(1 for p in BAD if p.values[1]) >= 12


@pytest.mark.parametrize(("case", "rejects"), BAD)
def test_bad_case_against_schema(case: Path, rejects: bool) -> None:
    document = _document(case)
    if rejects:
        assert not _validator().is_valid(document), "the schema accepts it"
    else:
        assert _errors(document) == []


@pytest.mark.parametrize(
    "document",
    [
        pytest.param({"schema": 1, "project": {"name": "x"}, "binaries": {}}, id="no-binaries"),
        pytest.param({"schema": 1, "project": {"name": "x"}}, id="binaries-missing"),
        pytest.param(
            {"schema": 1, "project": {"name": "x"}, "binaries": {"a": {"source": "."}}},
            id="entrypoint-missing",
        ),
        pytest.param(
            {
                "schema": 1,
                "project": {"name": "x", "python": 3.11},
                "binaries": {"a": {"source": ".", "entrypoint": "a:b"}},
            },
            id="python-float",
        ),
    ],
)
def test_schema_rejects_inline(document: dict[str, Any]) -> None:
    assert not _validator().is_valid(document)


@pytest.mark.parametrize(
    "document",
    [
        pytest.param(
            {"schema": 1, "project": {"name": "x"}, "binaries": {"Bad_Name": 42}},
            id="binary-name",
        ),
        pytest.param(
            {
                "schema": 1,
                "project": {"name": "x"},
                "groups": {"Upper": "not a list"},
                "binaries": {"a": {"source": ".", "entrypoint": "a:b"}},
            },
            id="group-name",
        ),
        pytest.param(
            {
                "schema": 1,
                "project": {"name": "x"},
                "binaries": {
                    "a": {"source": ".", "entrypoint": "a:b", "image": {"env": {"1X": 2}}}
                },
            },
            id="env-name",
        ),
    ],
)
def test_schema_rejects_bad_mapping_keys(document: dict[str, Any]) -> None:
    assert not _validator().is_valid(document)
