"""Exit codes and the report.json and release.json fields, from their types."""

from __future__ import annotations

from shipyard._docs import outputs


def test_release_fields_are_what_staging_writes() -> None:
    fields = dict(outputs.release_fields())
    assert fields["snapshot"] == "boolean"
    assert fields["artifacts[].manifests[].digest"] == "string"
    assert "artifacts[].sbom.platforms[].of" in fields
    assert "build.version" not in fields, "build's inside is the stamp's, left as one object"


def test_report_fields_are_read_off_the_code_that_writes_them() -> None:
    fields = outputs.report_fields()
    for name in ("dirty", "actions[].status", "actions[].outputs[].sha256", "skips[].reason"):
        assert name in fields


def test_a_field_without_a_meaning_is_caught(monkeypatch: object) -> None:
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.delitem(outputs.RELEASE_FIELDS, "snapshot")
    assert outputs.undocumented() == ["release.json: snapshot"]


def test_exit_codes_list_every_error_class_with_its_code() -> None:
    text = outputs.exit_codes_page()
    assert "| 2 | `shipyard.errors.ManifestError` |" in text
    assert "| 1 | `shipyard.errors.BuildError` |" in text
    assert text.count("`shipyard.oci.layercheck.UnsafeLayerError`") == 1
