"""shipyard._toml: TOML nested deeper than the parser's stack is bad input (exit 2 naming
the file), never a RecursionError traceback, and a broken project fails only its users.

Regression (security issue, item 7): a `pyproject.toml` or `uv.lock` holding
`x = [[[[...]]]]` a few thousand levels deep crashed `check`, `plan` and `build` with a
RecursionError from tomllib.
"""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.reliability import record
from tests.unit.workspace.test_workspace_cli import _ENV, shipyard

DEPTH = 5000  # far past the recursion limit, as an attacker's file would be
DEEP = f"x = {'[' * DEPTH}{']' * DEPTH}\n"


def _pyproject(folder: Path, name: str, deps: list[str], tail: str = "") -> None:
    (folder / name.replace("-", "_")).mkdir(parents=True)
    (folder / name.replace("-", "_") / "__init__.py").write_text("def main() -> None: ...\n")
    listed = ", ".join(f'"{d}"' for d in deps)
    (folder / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "1.0"\ndependencies = [{listed}]\n{tail}'
    )


def _repo(tmp_path: Path, deep: str, text: str = DEEP) -> Path:
    """`app` (no in-repo dependency) and `other` (needs `lib`), each a binary; the folder
    `deep` ("app", "lib" or "" for none) gets `text`, a value nested DEPTH levels deep."""
    root = tmp_path / "repo"
    for name, deps in (("lib", []), ("app", []), ("other", ["lib"])):
        _pyproject(root / name, name, deps, text if name == deep else "")
    (root / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: r, version: '1.0'}\n"
        "defaults: {outputs: [wheel, zipapp], platforms: [linux/amd64]}\nbinaries:\n"
        "  app: {source: app, entrypoint: 'app:main'}\n"
        "  other: {source: other, entrypoint: 'other:main'}\n"
    )
    for args in (("init", "-q"), ("add", "-A"), ("commit", "-q", "-m", "one")):
        subprocess.run(["git", *args], cwd=root, env=_ENV, check=True, capture_output=True)
    return root


def test_deep_nesting_is_a_decode_error_at_the_place_it_gets_deep() -> None:
    """A RecursionError (and where the nesting passes NESTING levels) becomes the
    TOMLDecodeError callers handle; strings and comments holding brackets nest nothing."""
    from shipyard import _toml  # here: the rest of the file runs against any shipyard

    text = f'a = "[[[["\n# {{{{[[\nb = {{ c = {"[" * DEPTH}{"]" * DEPTH} }}\n'
    with pytest.raises(tomllib.TOMLDecodeError) as caught:
        _toml.loads(text)
    # Line 3 is `b = { c = [[[...`: level 1 is the `{` at column 5, level NESTING + 1
    # the bracket NESTING - 1 past the first `[` at column 11.
    assert f"(at line 3, column {11 + _toml.NESTING - 1})" in str(caught.value)
    assert f"more than {_toml.NESTING} levels" in str(caught.value)
    shallow = "a = [[1, [2]], {b = {c = [3]}}]\n"
    assert _toml.loads(shallow) == tomllib.loads(shallow)


@pytest.mark.parametrize(
    "command", [("check",), ("plan", "--binary=app"), ("build", "--dry-run", "--binary=app")]
)
def test_a_deep_pyproject_of_a_selected_binary_exits_2_naming_it(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    """Bug: RecursionError traceback from tomllib on the binary's own pyproject.toml."""
    root = _repo(tmp_path, "app")
    done = shipyard(root, *command)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 2, done.stderr[-2000:]
    assert "app/pyproject.toml:5:" in done.stderr
    assert "nested more than" in done.stderr and "flatten" in done.stderr


@pytest.mark.parametrize("command", [("check",), ("plan",)])
def test_a_deep_uv_lock_exits_2_naming_it(command: tuple[str, ...], tmp_path: Path) -> None:
    """Bug: the same RecursionError traceback from uv.lock."""
    root = _repo(tmp_path, "")
    (root / "uv.lock").write_text(f'version = 1\n\n[[package]]\nname = "a"\n{DEEP}')
    done = shipyard(root, *command)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 2, done.stderr[-2000:]
    assert "uv.lock:5:" in done.stderr and "run `uv lock`" in done.stderr


def test_a_deep_library_fails_only_the_binaries_that_use_it(tmp_path: Path) -> None:
    """Bug: one deep pyproject.toml anywhere in the repository crashed every command,
    even for binaries that never use it; now only its users fail."""
    root = _repo(tmp_path, "lib")
    (root / "other" / "pyproject.toml").write_text(
        '[project]\nname = "other"\nversion = "1.0"\ndependencies = ["lib"]\n'
        '[tool.uv.sources]\nlib = { path = "../lib" }\n'
    )
    subprocess.run(["git", "commit", "-qam", "path"], cwd=root, env=_ENV, check=True)
    plan = shipyard(root, "plan", "--binary=app")
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert [line.split()[0] for line in plan.stdout.splitlines()] == ["wheel:app", "zipapp:app"]
    user = shipyard(root, "plan", "--binary=other")
    assert "Traceback" not in user.stderr, user.stderr[-2000:]
    assert user.returncode == 2, user.stderr[-2000:]
    assert "lib/pyproject.toml:5:" in user.stderr and "nested more than" in user.stderr


def test_a_deep_project_no_binary_uses_leaves_check_and_build_alone(tmp_path: Path) -> None:
    """Bug: a test fixture nested deep on purpose crashed `check` for the whole repository."""
    root = _repo(tmp_path, "")
    _pyproject(root / "fixtures" / "deep", "deep-fixture", [], DEEP)
    subprocess.run(["git", "add", "-A"], cwd=root, env=_ENV, check=True)
    for command in (("check",), ("build", "--dry-run")):
        done = shipyard(root, *command)
        assert "Traceback" not in done.stderr, done.stderr[-2000:]
        assert done.returncode == 0, done.stderr[-2000:]


# Shapes of deep nesting, each DEPTH levels: arrays, inline tables, both in turn.
SHAPES = {
    "arrays": DEEP,
    "inline tables": f"x = {'{a = ' * DEPTH}1{'}' * DEPTH}\n",
    "arrays of inline tables": f"x = {'[{a = ' * DEPTH}1{'}]' * DEPTH}\n",
}
COMMANDS = (("check",), ("plan", "--binary=app"), ("build", "--dry-run", "--binary=app"))


@pytest.mark.reliability
def test_reliability_deep_documents_are_exit_2_never_a_traceback(tmp_path: Path) -> None:
    """Every shape of deep nesting, in a binary's pyproject.toml and in uv.lock, through
    every command that reads them: exit 2 naming the file, no traceback; in a library no
    selected binary uses, the plan goes on."""
    runs = refused = 0
    failures: list[str] = []
    for number, (shape, text) in enumerate(SHAPES.items()):
        cases = {
            "app/pyproject.toml": _repo(tmp_path / f"p{number}", "app", text),
            "uv.lock": _repo(tmp_path / f"l{number}", ""),
        }
        (cases["uv.lock"] / "uv.lock").write_text(f'version = 1\n\n[[package]]\nname = "a"\n{text}')
        for name, root in cases.items():
            for command in COMMANDS:
                done = shipyard(root, *command)
                runs += 1
                if (
                    done.returncode == 2
                    and f"{name}:" in done.stderr
                    and "Traceback" not in (done.stderr)
                ):
                    refused += 1
                else:
                    failures.append(f"{shape} in {name}, {command}: {done.stderr[-300:]}")
        unused = _repo(tmp_path / f"u{number}", "lib", text)
        done = shipyard(unused, "plan", "--binary=app")
        runs += 1
        if done.returncode != 0:
            failures.append(f"{shape} in an unused library: {done.stderr[-300:]}")
    record(
        "deeply nested TOML in the repository",
        area="hostile documents",
        cases=runs,
        injected=f"values nested {DEPTH} levels deep ({', '.join(SHAPES)}) in a binary's "
        "pyproject.toml, in uv.lock and in a library no selected binary uses, through "
        "check, plan and build --dry-run",
        result=f"{refused} of {len(SHAPES) * 2 * len(COMMANDS)} runs on a file in use exited "
        "2 naming FILE:LINE:COL where the nesting passes 100 levels, none with a traceback; "
        f"{len(SHAPES)} plans of a binary not using the deep library succeeded",
        figures={"runs": runs, "exit_2": refused, "failures": len(failures), "depth": DEPTH},
    )
    assert not failures, "\n".join(failures)
