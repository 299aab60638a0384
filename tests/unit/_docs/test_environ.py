"""The environment page lists every row of the table, by who reads it."""

from __future__ import annotations

from shipyard._docs import environ
from shipyard._environ import VARIABLES


def test_every_variable_is_on_the_page_once() -> None:
    text = environ.page()
    for variable in VARIABLES:
        assert text.count(f"| `{variable.name}`") == 1, variable.name
    assert "## Read by a zipapp shipyard built" in text
    assert "`SHIPYARD_SIGNING_KEY` *secret*" in text
    # Marked as process.is_secret decides what build steps never see: users too.
    assert "`SHIPYARD_REGISTRY_USER` *secret*" in text
    assert "`SHIPYARD_CACHE_DIR` |" in text


def test_mentioned_finds_the_names_the_code_reads() -> None:
    found = environ.mentioned()
    assert found["SHIPYARD_ZIPAPP_KEEP"].startswith("src/shipyard/builders/zipapp/_boot/")
    assert "SHIPYARD_CACHE_TOKEN" in found
    assert "SHIPYARD_ACTION" not in found, "an exported constant's name is no variable"
