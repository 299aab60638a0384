"""JUnit XML: each stage's file, the counts in it, and the one merged file CI reads.

A pytest stage's file is pytest's own (`--junitxml`), its suites renamed
`<project>:<stage>`; any other tool's stage (ruff, mypy) is one test case named
after the stage, failed with the end of its log when the stage failed. The merged
file (`dist/test-results.xml`) holds every stage of a run, a stage that did not run
as a skipped case with the reason, so CI test tabs show the whole run.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from shipyard._fs import atomic_write

__all__ = ["MAX_XML", "Counts", "StageXml", "counts", "failed_cases", "merge", "stage_xml"]

MAX_XML = 16 << 20  # a stage's JUnit file larger than this is not read (counts unknown)
MAX_DEPTH = 6  # testsuites > testsuite > testcase > failure / properties > property


@dataclass(frozen=True)
class Counts:
    """Test cases in a stage's JUnit file, by outcome."""

    tests: int = 0
    failures: int = 0
    errors: int = 0
    skipped: int = 0

    @property
    def passed(self) -> int:
        """The cases that neither failed, errored nor were skipped."""
        return max(0, self.tests - self.failures - self.errors - self.skipped)

    def to_json(self) -> dict[str, int]:
        """As report.json lists it."""
        return {
            "tests": self.tests,
            "passed": self.passed,
            "failed": self.failures,
            "errors": self.errors,
            "skipped": self.skipped,
        }

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            self.tests + other.tests,
            self.failures + other.failures,
            self.errors + other.errors,
            self.skipped + other.skipped,
        )


def _depth(element: ET.Element, limit: int = MAX_DEPTH) -> int:
    """How deep `element` nests, counting past `limit` no further (no recursion)."""
    deepest = 0
    stack = [(element, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        if level > limit:
            break
        stack.extend((child, level + 1) for child in node)
    return deepest


def _read(path: Path) -> ET.Element | None:
    """The JUnit document at `path`, if it is one of the shape pytest writes: under
    MAX_XML bytes, a `testsuites` (or one `testsuite`) root with suites only directly
    under it, nesting no deeper than MAX_DEPTH. None otherwise (a cache entry may lie)."""
    try:
        if path.stat().st_size > MAX_XML:
            return None
        root = ET.fromstring(path.read_bytes())
    except (OSError, ET.ParseError, RecursionError, ValueError):
        return None
    if root.tag not in ("testsuites", "testsuite") or _depth(root) > MAX_DEPTH:
        return None
    suites = [root] if root.tag == "testsuite" else list(root)
    if any(s.tag != "testsuite" for s in suites):
        return None
    if any(c.tag == "testsuite" for s in suites for c in s.iter() if c is not s):
        return None  # a suite inside a suite: counted twice, never what pytest writes
    return root


def _suites(root: ET.Element) -> list[ET.Element]:
    return [root] if root.tag == "testsuite" else [s for s in root if s.tag == "testsuite"]


def _cases(root: ET.Element) -> Iterable[ET.Element]:
    for suite in _suites(root):
        yield from suite.iter("testcase")


def _count(root: ET.Element) -> Counts:
    total = Counts()
    for case in _cases(root):
        tags = {child.tag for child in case}
        total += Counts(
            1,
            int("failure" in tags),
            int("error" in tags and "failure" not in tags),
            int("skipped" in tags),
        )
    return total


def passed_result(path: Path, project: str, stage: str) -> bool:
    """Whether `path` is the JUnit file of a passed stage `stage` of `project`: readable
    (`_read`), every suite named `<project>:<stage>`, no failure or error. What a cache
    restores is used only then."""
    root = _read(path)
    if root is None:
        return False
    name = f"{project}:{stage}"
    if any(s.get("name") != name for s in _suites(root)):
        return False
    return not any(c.tag in ("failure", "error") for c in root.iter())


def counts(path: Path) -> Counts | None:
    """The counts of the JUnit file at `path`; None when it cannot be read."""
    root = _read(path)
    return None if root is None else _count(root)


def failed_cases(path: Path, limit: int = 5) -> list[str]:
    """The first `limit` failed or errored cases of the file, as classname::name."""
    root = _read(path)
    found: list[str] = []
    for case in _cases(root) if root is not None else ():
        if any(child.tag in ("failure", "error") for child in case):
            name = case.get("name", "?")
            classname = case.get("classname", "")
            found.append(f"{classname}::{name}" if classname else name)
            if len(found) >= limit:
                break
    return found


@dataclass(frozen=True)
class StageXml:
    """One stage's outcome for the merged file."""

    project: str
    stage: str
    status: str  # passed, cached, failed, skipped
    duration: float
    path: Path | None  # its JUnit file, when it has one
    reason: str = ""


def stage_xml(
    project: str,
    stage: str,
    *,
    passed: bool,
    duration: float,
    pytest_xml: Path | None,
    log_tail: str,
) -> bytes:
    """The JUnit file of one stage: pytest's, renamed, when it wrote one; else one case."""
    name = f"{project}:{stage}"
    root = _read(pytest_xml) if pytest_xml is not None else None
    if root is not None:  # pytest's own, even with no case (nothing selected)
        top = ET.Element("testsuites")
        for suite in _suites(root):
            suite.set("name", name)
            top.append(suite)
        _totals(top)
        return bytes(ET.tostring(top, encoding="utf-8", xml_declaration=True))
    top = ET.Element("testsuites")
    suite = ET.SubElement(top, "testsuite", name=name)
    case = ET.SubElement(suite, "testcase", classname=project, name=stage, time=f"{duration:.3f}")
    if not passed:
        failure = ET.SubElement(case, "failure", message=f"{stage} of {project} failed")
        failure.text = log_tail
    _totals(top)
    return bytes(ET.tostring(top, encoding="utf-8", xml_declaration=True))


def _totals(top: ET.Element) -> None:
    """Set the count attributes of every suite and of the root from their cases."""
    total = Counts()
    seconds = 0.0
    for suite in top.iter("testsuite"):
        found = _count(suite)
        total += found
        suite.set("tests", str(found.tests))
        suite.set("failures", str(found.failures))
        suite.set("errors", str(found.errors))
        suite.set("skipped", str(found.skipped))
        seconds += sum(float(c.get("time", "0") or 0) for c in suite.iter("testcase"))
    top.set("tests", str(total.tests))
    top.set("failures", str(total.failures))
    top.set("errors", str(total.errors))
    top.set("skipped", str(total.skipped))
    top.set("time", f"{seconds:.3f}")


def merge(stages: Iterable[StageXml], dest: Path) -> Counts:
    """Write every stage into one JUnit file at `dest`; return the totals."""
    top = ET.Element("testsuites", name="shipyard test")
    for stage in stages:
        root = _read(stage.path) if stage.path is not None else None
        if root is not None and stage.status != "skipped":
            for suite in _suites(root):
                top.append(suite)
            continue
        suite = ET.SubElement(top, "testsuite", name=f"{stage.project}:{stage.stage}")
        case = ET.SubElement(suite, "testcase", classname=stage.project, name=stage.stage)
        case.set("time", f"{stage.duration:.3f}")
        if stage.status == "failed":
            ET.SubElement(case, "failure", message=stage.reason[:500] or "failed")
        elif stage.status == "skipped":
            ET.SubElement(case, "skipped", message=stage.reason[:500] or "not run")
    _totals(top)
    total = Counts(*(int(top.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")))
    ET.indent(top)
    atomic_write(
        dest, ET.tostring(top, encoding="utf-8", xml_declaration=True) + b"\n", durable=False
    )
    return total
