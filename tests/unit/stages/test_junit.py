"""A test stage's JUnit file from a cache is untrusted: only a passed stage's file of
the shape pytest writes is used; anything else is a miss, run again (issue 26 review)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shipyard.stages._junit import MAX_XML, StageXml, counts, merge, passed_result

GOOD = (
    '<testsuites><testsuite name="app:unit" tests="1">'
    '<testcase classname="tests.test_a" name="test_a"/></testsuite></testsuites>'
)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (GOOD.replace("app:unit", "other:unit"), "another stage's suite"),
        (GOOD.replace("<testcase", "<testsuite name='app:unit'><testcase").replace(
            "</testsuite></testsuites>", "</testsuite></testsuite></testsuites>"
        ), "a suite inside a suite"),
        (GOOD.replace("/>", "><failure message='x'/></testcase>"), "a failure in a pass"),
        ("<testsuites><testsuite name='app:unit'><testcase name='a'>" + "<x>" * 5000
         + "</x>" * 5000 + "</testcase></testsuite></testsuites>", "nested 5000 deep"),
        ("<html/>", "not JUnit"),
        ("<testsuites", "not XML"),
    ],
)  # fmt: skip
def test_a_hostile_entry_is_refused(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "unit.xml"
    path.write_text(text)
    assert passed_result(path, "app", "unit") is False, why


def test_a_passed_stage_file_is_accepted_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "unit.xml"
    path.write_text(GOOD)
    assert passed_result(path, "app", "unit")
    found = counts(path)
    assert found is not None and (found.tests, found.passed) == (1, 1)


def test_an_oversized_file_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "unit.xml"
    with path.open("wb") as out:
        out.write(GOOD.encode())
        out.truncate(MAX_XML + 1)
    assert counts(path) is None and not passed_result(path, "app", "unit")


def test_a_deep_file_in_the_merge_is_a_case_not_a_crash(tmp_path: Path) -> None:
    deep = tmp_path / "deep.xml"
    deep.write_text(
        "<testsuites><testsuite name='app:unit'>" + "<x>" * 5000 + "</x>" * 5000
        + "</testsuite></testsuites>"
    )  # fmt: skip
    total = merge([StageXml("app", "unit", "cached", 0.1, deep)], tmp_path / "all.xml")
    assert total.tests == 1  # the stage as one case: its file was not read
