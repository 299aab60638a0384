"""Every manifest problem in one run, in file order, with one key-path style (issue 18, item 9).

Three mistakes in one binaries.yaml used to come out two, then one: the loader stopped at
the first stage that found anything (expansion, then the schema, then the file checks).
Cases in tests/manifests/ whose expect.json lists `problems` must report exactly those, in
that order; a problem's `file` (default binaries.yaml) is relative to the case folder.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shipyard.errors import Location, ManifestError, Problem
from shipyard.manifest import load_manifest
from shipyard.manifest._report import MAX_PROBLEMS, dotted

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
CASES = sorted(
    case
    for case in MANIFESTS.iterdir()
    if (case / "expect.json").is_file()
    and "problems" in json.loads((case / "expect.json").read_text(encoding="utf-8"))
)
# A list index written as `.0` rather than `[0]` (the style the loader used to mix in).
_DOTTED_INDEX = re.compile(r"\.\d+(\.|\[|$)")


def _install(case: Path, tmp_path: Path) -> Path:
    target = tmp_path / case.name
    shutil.copytree(case, target, ignore=shutil.ignore_patterns("expect.json"))
    (target / ".git").mkdir()
    return target / "binaries.yaml"


def _problems(manifest: Path, env: dict[str, str] | None = None) -> tuple[Problem, ...]:
    with pytest.raises(ManifestError) as info:
        load_manifest(manifest, {} if env is None else env)
    return info.value.problems


def _matches(seen: Problem, want: dict[str, Any], folder: Path) -> bool:
    file = (folder / want.get("file", "binaries.yaml")).resolve()
    return (
        seen.location.file == file
        and (seen.location.line, seen.location.column) == (want["line"], want["column"])
        and seen.path == want["path"]
        and want["message_contains"] in seen.message
        and want.get("hint_contains", "") in seen.hint
    )


def test_enough_cases_list_every_problem() -> None:
    assert len(CASES) >= 3


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_problem_at_once_in_file_order(case: Path, tmp_path: Path) -> None:
    expect = json.loads((case / "expect.json").read_text(encoding="utf-8"))
    manifest = _install(case, tmp_path)
    seen = _problems(manifest, expect.get("env"))
    shown = "\n".join(str(p) for p in seen)
    assert len(seen) == len(expect["problems"]), shown
    for problem, want in zip(seen, expect["problems"], strict=True):
        assert _matches(problem, want, manifest.parent), f"{want}\nnot matched by\n{problem}"


def test_the_cli_prints_every_problem_and_exits_2(tmp_path: Path) -> None:
    manifest = _install(MANIFESTS / "every-mistake-at-once", tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "shipyard", "check", "-f", str(manifest)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("shipyard: error: "), done.stderr
    lines = done.stderr.removeprefix("shipyard: error: ").splitlines()
    where = f"{manifest.resolve()}:"
    assert [line.split(": ", 2)[1] for line in lines] == [
        "project.version",
        "groups.tools[1]",
        "binaries.meshctl.source",
        "binaries.meshctl.outputs[1]",
        "binaries.meshctl.platfroms",
    ], done.stderr
    assert all(line.startswith(where) for line in lines), done.stderr
    assert "did you mean 'examples/mesh/ctl'?" in done.stderr


def test_no_problem_writes_a_list_index_with_a_dot(tmp_path: Path) -> None:
    for case in sorted(MANIFESTS.iterdir()):
        if case.name.startswith("good-") or not case.is_dir():
            continue
        expect = json.loads((case / "expect.json").read_text(encoding="utf-8"))
        if expect.get("max_seconds") is not None:
            continue  # the bombs have their own test; their paths are not the point
        try:
            load_manifest(_install(case, tmp_path), expect.get("env", {}))
        except ManifestError as exc:
            for problem in exc.problems:
                assert not _DOTTED_INDEX.search(problem.path), f"{case.name}: {problem}"


@pytest.mark.parametrize(
    ("path", "text"),
    [
        (("binaries", "meshctl", "outputs", 0), "binaries.meshctl.outputs[0]"),
        (("groups", "tools", 1), "groups.tools[1]"),
        (("defaults", "image", "hubs", 0), "defaults.image.hubs[0]"),
        (("binaries", "mesh.ctl", "source"), "binaries.'mesh.ctl'.source"),
        (("binaries", "app", "image", "labels", "org.x"), "binaries.app.image.labels.'org.x'"),
        (("binaries", "a\nb"), "binaries.'a\\nb'"),
        ((), ""),
    ],
)
def test_key_paths_have_one_style(path: tuple[str | int, ...], text: str) -> None:
    assert dotted(path) == text


def _repository(tmp_path: Path, manifest: str, folders: tuple[str, ...] = ()) -> Path:
    (tmp_path / ".git").mkdir()
    for folder in folders:
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "binaries.yaml").write_text(manifest, encoding="utf-8")
    return tmp_path / "binaries.yaml"


def test_missing_source_suggests_an_existing_project_folder(tmp_path: Path) -> None:
    manifest = _repository(
        tmp_path,
        "schema: 1\nproject: {name: demo}\nbinaries:\n"
        "  ctl: {source: examples/mesh/cli, entrypoint: 'a:b'}\n"
        "  web: {source: services/wbe, entrypoint: 'a:b'}\n"
        "  zzz: {source: nowhere/at/all, entrypoint: 'a:b'}\n",
        ("examples/mesh/ctl", "services/web", ".venv/lib/services/wbe"),
    )
    (tmp_path / "examples" / "mesh" / "clients").mkdir()  # a folder, but no project
    seen = {p.path: p for p in _problems(manifest)}
    assert seen["binaries.ctl.source"].message == "no folder 'examples/mesh/cli'"
    assert seen["binaries.ctl.source"].hint == "did you mean 'examples/mesh/ctl'?"
    # Hidden folders (.venv, .git) are never suggested.
    assert seen["binaries.web.source"].hint == "did you mean 'services/web'?"
    # Nothing close: the project folders there are, so the fix is one look away.
    assert seen["binaries.zzz.source"].hint == (
        "folders with a pyproject.toml: examples/mesh/ctl, services/web"
    )


def test_a_lock_files_problems_follow_the_key_that_names_it(tmp_path: Path) -> None:
    manifest = _repository(
        tmp_path,
        "schema: 1\n"
        "project:\n"
        "  name: Demo\n"
        "binaries:\n"
        "  app:\n"
        "    source: app\n"
        "    entrypoint: app.main:main\n"
        "    requirements: locks/app.txt\n"
        "    host: [linux, bsd]\n",
        ("app",),
    )
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "app.txt").write_text("click>=8\nrich==13.7.1\n")
    seen = [(p.location.file.name, p.location.line, p.path) for p in _problems(manifest)]
    assert seen == [
        ("binaries.yaml", 3, "project.name"),
        ("app.txt", 1, "binaries.app.requirements"),
        ("app.txt", 2, "binaries.app.requirements"),
        ("binaries.yaml", 9, "binaries.app.host[1]"),
    ]


def test_a_schema_problem_does_not_hide_the_group_and_source_problems(tmp_path: Path) -> None:
    manifest = _repository(
        tmp_path,
        "schema: 1\n"
        "project: {name: demo, pyhton: '3.12'}\n"
        "groups: {tools: [ctl, clt], Bad: [ctl]}\n"
        "binaries:\n"
        "  ctl: {source: ctl, entrypoint: 'ctl:main'}\n"
        "  web: {source: wbe, entrypoint: 42}\n",
        ("ctl", "web"),
    )
    found = [(p.path, p.message) for p in _problems(manifest)]
    assert found == [
        ("project.pyhton", "unknown key 'pyhton'"),
        ("groups.tools[1]", "unknown binary or group 'clt'"),
        ("groups.Bad", "'Bad' is not a valid group name"),
        ("binaries.web.source", "no folder 'wbe'"),
        ("binaries.web.entrypoint", "expected a string, got int"),
    ]


def test_many_problems_stay_capped(tmp_path: Path) -> None:
    entries = "".join(
        f"  b{i}: {{source: gone{i}, entrypoint: 'a:b', outputs: [wheel, jar]}}\n"
        for i in range(30)
    )
    manifest = _repository(tmp_path, "schema: 1\nproject: {name: demo}\nbinaries:\n" + entries)
    seen = _problems(manifest)
    assert len(seen) == MAX_PROBLEMS + 1
    assert seen[-1].message == "and 40 more problems"
    lines = [p.location.line for p in seen[:-1]]
    assert lines == sorted(lines)


def test_a_bad_group_name_that_is_also_a_binary_stays_on_one_short_line(tmp_path: Path) -> None:
    """Found by the fuzz run: the name reached the message raw (a U+0085 split the line;
    a 3,000-character name made a 3,000-character line)."""
    for name in ('"\\N"', "x" * 3000):
        manifest = tmp_path / "binaries.yaml"
        manifest.write_text(
            f"schema: 1\nproject: null\nbinaries:\n  ? {name}\n  : null\n"
            f"groups:\n  g1: []\n  ? {name}\n  : []\n"
        )
        done = subprocess.run(
            [sys.executable, "-m", "shipyard", "-f", str(manifest), "check"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 2
        lines = done.stderr.removeprefix("shipyard: error: ").splitlines()
        assert any("is both a group and a binary" in line for line in lines)
        for line in lines:
            assert line.startswith(f"{manifest}:") and len(line) < 400, line


def test_every_problem_prints_as_one_short_line_whatever_it_quotes() -> None:
    """The last guard behind every message that quotes the manifest (the fuzz run found
    two that quoted a name raw): line breaks of any kind are escaped, length is capped."""
    where = Location(Path("binaries.yaml"), 3, 5)
    for raw in ("a\x85b", "a\u2028b", "a\nb", "a\rb", "x" * 5000):
        text = str(Problem(where, "groups.g", f"unknown '{raw}'", f"did you mean '{raw}'?"))
        assert text.splitlines() == [text] and len(text) <= 1000, text[:200]
        assert text.startswith("binaries.yaml:3:5: groups.g: unknown ")
