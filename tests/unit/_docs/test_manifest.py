"""The manifest reference walks the JSON Schema of the model: every key, with examples."""

from __future__ import annotations

from pathlib import Path

from shipyard._docs import manifest


def test_every_key_of_the_model_is_listed_with_type_and_default() -> None:
    found = {k.path: k for k in manifest.all_keys()}
    source = found["binaries.<name>.source"]
    assert source.required and source.type == "string" and source.section == "BinaryDoc"
    assert found["project.version"].default == '"git"'
    assert found["binaries.<name>.image.variants.<name>.env"].type == "mapping of names"
    assert "tests.stages.<name>.services[].start" in found
    assert found["binaries.<name>.zipapp.compress"].type == "boolean"
    outputs = found["binaries.<name>.outputs"].type
    assert outputs == 'list of "wheel" | "zipapp" | "image"'


def test_a_choice_of_values_stays_in_one_table_cell() -> None:
    """The pipes between choices are escaped once: the row keeps its five cells."""
    line = next(
        row for row in manifest.page().splitlines() if row.startswith("| `binaries.<name>.outputs`")
    )
    assert 'list of "wheel" \\| "zipapp" \\| "image"' in line
    assert line.replace("\\|", "").count("|") == 6


def test_examples_come_from_the_repository_manifests(tmp_path: Path) -> None:
    (tmp_path / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: demo}\n"
        "binaries:\n  a: {source: apps/a, entrypoint: 'a.main:run', smoke: [--help]}\n"
    )
    found = {k.path: k for k in manifest.all_keys(tmp_path)}
    assert found["binaries.<name>.entrypoint"].example == "a.main:run"
    assert found["binaries.<name>.smoke"].example == '["--help"]'
    assert found["binaries.<name>.host"].example == ""
    page = manifest.page(tmp_path)
    assert "| `binaries.<name>.entrypoint` (required) | string |" in page
