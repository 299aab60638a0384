"""`shipyard test` (issue 26): the test stages of a uv workspace's projects as cached
actions, in environments uv makes from the lock.

The workspace is real and small: a library (acme-core) used by an app (acme-tool) and
an unrelated project (acme-other), each with pytest tests, a dev group and a lock that
uv writes here. Stages run for real: pytest, a service started on a free loopback port
for the integration stage, a stage that is not pytest (compileall), a failure, a
timeout.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from shipyard.cli import main
from shipyard.stages._junit import counts

UV = shutil.which("uv") or str(Path(sys.executable).parent / "uv")

CORE_TEST = """\
from acme_core import double


def test_double() -> None:
    assert double(2) == 4


def test_double_negative() -> None:
    assert double(-3) == -6
"""
TOOL_TEST = """\
from acme_tool import describe


def test_describe_uses_core() -> None:
    assert describe(5) == "5 -> 10"
"""
LIVE_TEST = """\
import os
import urllib.request

import pytest


@pytest.mark.integration
def test_the_service_answers() -> None:
    port = os.environ["WEB_PORT"]
    with open(os.environ["PORT_NOTE"], "w") as note:
        note.write(port)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as reply:
        assert reply.status == 200
"""
OTHER_TEST = """\
def test_other() -> None:
    assert "other".upper() == "OTHER"
"""
MANIFEST = """\
schema: 1
project: {name: acme}
binaries:
  tool: {source: apps/tool, entrypoint: "acme_tool:main"}
groups:
  tools: [tool]
tests:
  stages:
    lint: {command: python -m compileall -q src}
  projects:
    acme-tool:
      integration:
        env: {PORT_NOTE: "%(note)s"}
        services:
          - name: web
            start: python -m http.server {port} --bind 127.0.0.1
"""


def _project(
    root: Path, folder: str, name: str, deps: list[str], code: str, tests: dict[str, str]
) -> None:
    home = root / folder
    module = name.replace("-", "_")
    (home / "src" / module).mkdir(parents=True)
    (home / "src" / module / "__init__.py").write_text(code)
    (home / "tests").mkdir()
    for file, text in tests.items():
        (home / "tests" / file).write_text(text)
    listed = ", ".join(f'"{d}"' for d in deps)
    sources = "".join(f"{d} = {{ workspace = true }}\n" for d in deps)
    (home / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "1.0"\nrequires-python = ">=3.11"\n'
        f"dependencies = [{listed}]\n\n"
        '[dependency-groups]\ndev = ["pytest>=8"]\n\n'
        '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
        'markers = ["integration: needs the service shipyard test starts"]\n\n'
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
        f'[tool.hatch.build.targets.wheel]\npackages = ["src/{module}"]\n\n'
        f"[tool.uv.sources]\n{sources}"
    )


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t.invalid", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def _workspace(root: Path, note: Path) -> Path:
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        '[tool.uv.workspace]\nmembers = ["libs/core", "apps/tool", "apps/other"]\n'
    )
    _project(root, "libs/core", "acme-core", [], "def double(x: int) -> int:\n    return 2 * x\n",
             {"test_core.py": CORE_TEST})  # fmt: skip
    _project(
        root,
        "apps/tool",
        "acme-tool",
        ["acme-core"],
        "from acme_core import double\n\n\ndef describe(x: int) -> str:\n"
        '    return f"{x} -> {double(x)}"\n\n\ndef main() -> int:\n    print(describe(2))\n'
        "    return 0\n",
        {"test_tool.py": TOOL_TEST, "test_live.py": LIVE_TEST},
    )
    _project(
        root, "apps/other", "acme-other", [], "NAME = 'other'\n", {"test_other.py": OTHER_TEST}
    )
    (root / "binaries.yaml").write_text(MANIFEST % {"note": note})
    (root / ".gitignore").write_text("/dist/\n/.shipyard/\n")
    _git(root, "init", "-q")
    return root


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The workspace with a uv.lock uv wrote, committed."""
    top = tmp_path_factory.mktemp("stages")
    root = _workspace(top / "repo", top / "port-note")
    subprocess.run([UV, "lock", "--quiet"], cwd=root, check=True, timeout=300)
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "workspace")
    return root


@pytest.fixture
def repo(locked: Path, tmp_path: Path) -> Path:
    target = tmp_path / "repo"
    shutil.copytree(locked, target, symlinks=True)
    return target


def _run(root: Path, *args: str, cache: Path) -> int:
    return main(["-f", str(root / "binaries.yaml"), "test", "--cache-dir", str(cache), *args])


def _report(root: Path) -> dict[str, dict[str, object]]:
    data = json.loads((root / "dist/report.json").read_text())
    return {a["id"]: a for a in data["actions"] if a["kind"] == "test"}


def _stages(root: Path, *args: str, cache: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    capsys.readouterr()
    assert _run(root, "--dry-run", "--json", *args, cache=cache) == 0
    return [s["id"] for s in json.loads(capsys.readouterr().out)["stages"]]


def test_a_cold_run_runs_every_stage_and_a_second_is_all_cache_hits(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    assert _run(repo, cache=cache) == 0
    first = _report(repo)
    assert sorted(first) == [
        "test:acme-core:lint", "test:acme-core:unit", "test:acme-other:lint",
        "test:acme-other:unit", "test:acme-tool:integration", "test:acme-tool:lint",
        "test:acme-tool:unit",
    ]  # fmt: skip
    assert {a["status"] for a in first.values()} == {"built"}
    assert first["test:acme-core:unit"]["tests"] == {
        "tests": 2, "passed": 2, "failed": 0, "errors": 0, "skipped": 0,
    }  # fmt: skip
    # The integration stage ran its one test against the service it started.
    assert first["test:acme-tool:integration"]["tests"]["passed"] == 1  # type: ignore[index]
    assert first["test:acme-tool:unit"]["tests"]["tests"] == 1  # type: ignore[index]
    # One JUnit file for CI, every stage a suite named project:stage.
    merged = ET.parse(repo / "dist/test-results.xml").getroot()
    names = sorted(s.get("name", "") for s in merged.iter("testsuite"))
    assert names == sorted(n.removeprefix("test:") for n in first)
    assert merged.get("tests") == "8" and merged.get("failures") == "0"
    assert (repo / "dist/logs/test-acme-core.unit.log").is_file()

    assert _run(repo, cache=cache) == 0
    second = _report(repo)
    assert {a["status"] for a in second.values()} == {"cached"}
    assert second["test:acme-core:unit"]["tests"] == first["test:acme-core:unit"]["tests"]
    out = capsys.readouterr().err
    assert "7 stages: 7 cached" in out


def test_the_service_is_stopped_after_its_stage(locked: Path, tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shutil.copytree(locked, root, symlinks=True)
    note = tmp_path / "note"
    text = (root / "binaries.yaml").read_text()
    (root / "binaries.yaml").write_text(text.replace(str(locked.parent / "port-note"), str(note)))
    assert _run(root, "--stage", "integration", cache=tmp_path / "cache") == 0
    port = int(note.read_text())
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), 1):
        pass


def test_since_runs_the_stages_of_a_changed_library_and_its_users(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    init = repo / "libs/core/src/acme_core/__init__.py"
    init.write_text(init.read_text() + "\nTRIPLE = 3\n")
    _git(repo, "commit", "-qam", "core grows")
    assert _stages(repo, "--since", "HEAD~1", cache=cache, capsys=capsys) == [
        "test:acme-core:lint", "test:acme-core:unit", "test:acme-tool:lint",
        "test:acme-tool:unit", "test:acme-tool:integration",
    ]  # fmt: skip
    assert _run(repo, "--since", "HEAD~1", cache=cache) == 0
    report = _report(repo)
    assert sorted(report) == sorted(
        ["test:acme-core:lint", "test:acme-core:unit", "test:acme-tool:lint",
         "test:acme-tool:unit", "test:acme-tool:integration"]
    )  # fmt: skip
    why = report["test:acme-tool:unit"]["affected"]
    assert why == [
        {
            "kind": "library",
            "path": "libs/core/src/acme_core/__init__.py",
            "via": ["acme-tool", "acme-core"],
            "detail": "",
            "text": "libs/core/src/acme_core/__init__.py changed (through acme-tool -> acme-core)",
        }
    ]
    assert report["test:acme-core:unit"]["affected"][0]["kind"] == "source"  # type: ignore[index]
    # An unrelated project's file: only that project.
    (repo / "apps/other/tests/test_more.py").write_text(OTHER_TEST.replace("other()", "more()"))
    assert _stages(repo, "--since", "HEAD", cache=cache, capsys=capsys) == [
        "test:acme-other:lint", "test:acme-other:unit",
    ]  # fmt: skip


def test_a_failing_test_exits_1_is_named_and_is_never_cached(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    (repo / "apps/other/tests/test_broken.py").write_text(
        "def test_arithmetic_is_broken() -> None:\n    assert 1 + 1 == 3\n"
    )
    for _ in range(2):
        capsys.readouterr()
        assert _run(repo, "--project", "acme-other", "--keep-going", cache=cache) == 1
        err = capsys.readouterr().err
        report = _report(repo)
        assert report["test:acme-other:unit"]["status"] == "failed"  # never a cache hit
        assert report["test:acme-other:lint"]["status"] in ("built", "cached")
        assert "tests.test_broken::test_arithmetic_is_broken" in err
    log = repo / "dist/logs/test-acme-other.unit.log"
    assert "assert (1 + 1) == 3" in log.read_text() or "assert 2 == 3" in log.read_text()
    merged = ET.parse(repo / "dist/test-results.xml").getroot()
    failed = [c.get("name") for c in merged.iter("testcase") if c.find("failure") is not None]
    assert failed == ["test_arithmetic_is_broken"]
    found = counts(repo / "dist/tests/acme-other/unit.xml")
    assert found is not None and (found.tests, found.failures) == (2, 1)


def test_a_stage_over_its_timeout_is_stopped_and_fails(repo: Path, tmp_path: Path) -> None:
    text = (repo / "binaries.yaml").read_text()
    (repo / "binaries.yaml").write_text(
        text.replace(
            "    lint: {command: python -m compileall -q src}",
            "    lint: {command: python -m compileall -q src}\n"
            "    slow: {command: \"python -c 'import time; time.sleep(60)'\", timeout: 2s}",
        )
    )
    started = time.monotonic()
    assert _run(repo, "--stage", "slow", "--project", "acme-core", cache=tmp_path / "c") == 1
    assert time.monotonic() - started < 40
    entry = _report(repo)["test:acme-core:slow"]
    assert entry["status"] == "failed"
    assert "ran longer than 2s" in str(entry["reason"])


def test_arguments_after_the_separator_reach_the_stage(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    args = ("--project", "acme-core", "--stage", "unit")
    assert _run(repo, *args, "--", "-k", "negative", cache=cache) == 0
    tally = _report(repo)["test:acme-core:unit"]["tests"]
    assert tally == {"tests": 1, "passed": 1, "failed": 0, "errors": 0, "skipped": 0}
    # Other arguments are another key: the full run is not a hit of the narrowed one.
    assert _run(repo, *args, cache=cache) == 0
    assert _report(repo)["test:acme-core:unit"]["status"] == "built"


def test_without_a_lock_the_environment_is_made_from_the_projects(
    repo: Path, tmp_path: Path
) -> None:
    (repo / "uv.lock").unlink()
    assert _run(repo, "--project", "acme-tool", "--stage", "unit", cache=tmp_path / "c") == 0
    assert _report(repo)["test:acme-tool:unit"]["tests"]["passed"] == 1  # type: ignore[index]
    python = repo / ".shipyard/envs/acme-tool/bin/python"
    done = subprocess.run(
        [str(python), "-c", "import acme_core, pytest; print(acme_core.__file__)"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    # The in-repo library is installed from its folder (editable), not from an index.
    assert done.stdout.strip() == str(repo / "libs/core/src/acme_core/__init__.py")


def test_selection_flags(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "cache"
    every = _stages(repo, cache=cache, capsys=capsys)
    halves = [_stages(repo, f"--shard={i}/2", cache=cache, capsys=capsys) for i in (1, 2)]
    assert sorted(halves[0] + halves[1]) == sorted(every)
    assert not set(halves[0]) & set(halves[1])
    # --target: the group's binaries' projects and the libraries they use.
    targets = _stages(repo, "--target", "tools", cache=cache, capsys=capsys)
    assert {s.split(":")[1] for s in targets} == {"acme-tool", "acme-core"}
    capsys.readouterr()
    assert _run(repo, "--stage", "unti", cache=cache) == 2
    assert "did you mean 'unit'?" in capsys.readouterr().err


def test_bad_test_entries_exit_2_at_their_line(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = repo / "binaries.yaml"
    text = manifest.read_text()
    manifest.write_text(text.replace("    acme-tool:\n", "    acme-tol:\n"))
    capsys.readouterr()
    assert _run(repo, cache=tmp_path / "c") == 2
    err = capsys.readouterr().err
    line = text.splitlines().index("    acme-tool:") + 1
    assert f"binaries.yaml:{line}:5: tests.projects.acme-tol" in err
    assert "did you mean 'acme-tool'?" in err and "Traceback" not in err
    manifest.write_text(text.replace("{command: python -m compileall -q src}", "{timeout: soon}"))
    assert _run(repo, cache=tmp_path / "c") == 2
    err = capsys.readouterr().err
    assert "tests.stages.lint.timeout: 'soon' is not allowed" in err
    # A stage named for one project, with nothing to run.
    manifest.write_text(
        text.replace("    acme-tool:\n", "    acme-tool:\n      docs: {timeout: 5m}\n")
    )
    assert _run(repo, cache=tmp_path / "c") == 2
    err = capsys.readouterr().err
    assert (
        f"binaries.yaml:{line + 1}:13: tests.projects.acme-tool.docs: stage 'docs' of "
        "acme-tool has no command" in err
    )
    assert "add command:" in err


def test_defaults_come_from_the_project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _workspace(tmp_path / "repo", tmp_path / "note")
    (root / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: acme}\n"
        'binaries:\n  tool: {source: apps/tool, entrypoint: "acme_tool:main"}\n'
    )
    (root / "ruff.toml").write_text("line-length = 100\n")
    core = root / "libs/core/pyproject.toml"  # no testpaths: pytest is pointed at tests/
    core.write_text(core.read_text().replace('testpaths = ["tests"]\n', ""))
    # The workspace's root project holds the others: no stages of its own by default.
    (root / "pyproject.toml").write_text(
        '[project]\nname = "acme-root"\nversion = "0"\nrequires-python = ">=3.11"\n'
        "[tool.uv]\npackage = false\n" + (root / "pyproject.toml").read_text()
    )
    (root / "tests").mkdir()
    (root / "tests/test_everything.py").write_text(OTHER_TEST)
    (root / "libs/core/mypy.ini").write_text("[mypy]\nstrict = True\n")
    shutil.rmtree(root / "apps/other/tests")
    other = root / "apps/other/pyproject.toml"
    head, _, rest = other.read_text().partition("[tool.pytest.ini_options]")
    other.write_text(head + "[build-system]" + rest.partition("[build-system]")[2])
    capsys.readouterr()
    assert main(["-f", str(root / "binaries.yaml"), "test", "--dry-run", "--json"]) == 0
    found = {
        s["id"]: (s["command"], s["from"]) for s in json.loads(capsys.readouterr().out)["stages"]
    }
    assert found == {
        "test:acme-core:lint": ("ruff check .", "default"),
        "test:acme-core:typecheck": ("python -m mypy .", "default"),
        "test:acme-core:unit": ('python -m pytest -m "not integration" tests', "default"),
        "test:acme-other:lint": ("ruff check .", "default"),
        "test:acme-tool:lint": ("ruff check .", "default"),
        "test:acme-tool:unit": ('python -m pytest -m "not integration"', "default"),
        "test:acme-tool:integration": ("python -m pytest -m integration", "default"),
    }
    # `shipyard plan` shows them too.
    assert main(["-f", str(root / "binaries.yaml"), "plan"]) == 0
    assert "  test:acme-tool:integration: python -m pytest -m integration (default)" in (
        capsys.readouterr().out
    )


def test_a_build_and_a_test_run_keep_each_others_report_entries(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert main(["-f", str(repo / "binaries.yaml"), "build", "--cache-dir", str(cache)]) == 0
    assert _run(repo, "--project", "acme-other", cache=cache) == 0
    kinds = [a["kind"] for a in json.loads((repo / "dist/report.json").read_text())["actions"]]
    assert "wheel" in kinds and "test" in kinds
    assert main(["-f", str(repo / "binaries.yaml"), "build", "--cache-dir", str(cache)]) == 0
    kinds = [a["kind"] for a in json.loads((repo / "dist/report.json").read_text())["actions"]]
    assert "wheel" in kinds and kinds.count("test") == 2


def test_requirements_files_go_into_the_stage_environment(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """tox-style test requirements: `-r` files read from the workspace root."""
    manifest = repo / "binaries.yaml"
    manifest.write_text(
        manifest.read_text().replace(
            "  projects:\n",
            "  projects:\n    acme-other:\n      unit:\n"
            '        command: python -c "import acme_core; assert acme_core.double(1) == 2"\n'
            "        requirements: [test-requirements.txt]\n",
        )
    )
    (repo / "apps/other/test-requirements.txt").write_text("-e libs/core\n")
    cache = tmp_path / "cache"
    assert _run(repo, "--project", "acme-other", "--stage", "unit", cache=cache) == 0
    assert _report(repo)["test:acme-other:unit"]["status"] == "built"
    # The file is an input: another line in it, another key.
    (repo / "apps/other/test-requirements.txt").write_text("-e libs/core\n# pinned\n")
    assert _run(repo, "--project", "acme-other", "--stage", "unit", cache=cache) == 0
    assert _report(repo)["test:acme-other:unit"]["status"] == "built"
    # A line removed: the environment is made again, so acme_core is gone and the stage
    # fails as it would on a fresh machine (an inexact sync would have kept it).
    (repo / "apps/other/test-requirements.txt").write_text("# nothing\n")
    capsys.readouterr()
    assert _run(repo, "--project", "acme-other", "--stage", "unit", cache=cache) == 1
    assert "acme_core is not installed in the stage's environment" in capsys.readouterr().err
    (repo / "apps/other/test-requirements.txt").unlink()
    assert _run(repo, "--project", "acme-other", "--stage", "unit", cache=cache) == 2  # bad input
    err = capsys.readouterr().err
    assert "test-requirements.txt: no such requirements file for the unit stage" in err
    assert "tests.projects.acme-other.unit.requirements" in err
    # A file outside the repository (its lines would reach logs CI uploads): exit 2.
    (repo.parent / "secret.txt").write_text("machine example password s3cr3t\n")
    text = manifest.read_text()
    manifest.write_text(text.replace("[test-requirements.txt]", "[../../../secret.txt]"))
    assert _run(repo, "--project", "acme-other", "--stage", "unit", cache=cache) == 2
    err = capsys.readouterr().err
    assert "is outside the repository" in err and "s3cr3t" not in err
    log = repo / "dist/logs/test-acme-other.unit.log"
    assert not log.exists() or "s3cr3t" not in log.read_text()


def test_a_repository_path_with_a_space(locked: Path, tmp_path: Path) -> None:
    """pytest splits PYTEST_ADDOPTS as a shell does: the JUnit path is quoted."""
    root = tmp_path / "my repo"
    shutil.copytree(locked, root, symlinks=True)
    assert _run(root, "--project", "acme-core", "--stage", "unit", cache=tmp_path / "c") == 0
    assert _report(root)["test:acme-core:unit"]["tests"]["passed"] == 2  # type: ignore[index]
    assert not (tmp_path / "my").exists()


def test_a_project_name_that_is_no_package_name_is_exit_2(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (repo / "uv.lock").unlink()
    pyproject = repo / "apps/other/pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('name = "acme-other"', 'name = "/tmp/x"'))
    capsys.readouterr()
    assert _run(repo, "--dry-run", cache=tmp_path / "c") == 2
    err = capsys.readouterr().err
    assert f"{pyproject}: [project].name '/tmp/x' is not a package name" in err


def test_shared_settings_without_a_command_change_only_projects_with_the_stage(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = repo / "binaries.yaml"
    manifest.write_text(
        manifest.read_text().replace("  stages:\n", "  stages:\n    integration: {timeout: 5m}\n")
    )
    stages = _stages(repo, "--stage", "integration", cache=tmp_path / "c", capsys=capsys)
    assert stages == ["test:acme-tool:integration"]
    # A well-known stage no project has is an empty selection, not an error.
    assert _stages(repo, "--stage", "typecheck", cache=tmp_path / "c", capsys=capsys) == []


def test_a_dev_group_at_the_workspace_root_is_installed_by_default(
    repo: Path, tmp_path: Path
) -> None:
    """uv installs a root's dev group with a member only when it is named: shipyard
    names it."""
    core = repo / "libs/core/pyproject.toml"
    core.write_text(core.read_text().replace('[dependency-groups]\ndev = ["pytest>=8"]\n', ""))
    root = repo / "pyproject.toml"
    root.write_text(
        '[project]\nname = "acme-root"\nversion = "0"\nrequires-python = ">=3.11"\n'
        '[dependency-groups]\ndev = ["pytest>=8"]\n[tool.uv]\npackage = false\n' + root.read_text()
    )
    subprocess.run([UV, "lock", "--quiet"], cwd=repo, check=True, timeout=300)
    assert _run(repo, "--project", "acme-core", "--stage", "unit", cache=tmp_path / "c") == 0
    assert _report(repo)["test:acme-core:unit"]["tests"]["passed"] == 2  # type: ignore[index]
