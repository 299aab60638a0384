"""Issue 14 in the engine: library wheel actions in the plan, per-binary stamps from each
binary's own inputs, and keys that follow a binary's slice of uv.lock."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest

from shipyard.artifacts import Artifact, Distribution, Metadata
from shipyard.builders.kinds import own_wheels
from shipyard.builders.locks import lock_inputs
from shipyard.engine.inputs import Inputs, version_inputs
from shipyard.engine.plan import Selection, make_plan
from shipyard.engine.scheduler import BuildContext
from shipyard.engine.stamps import input_stamps
from shipyard.errors import ShipyardError
from shipyard.manifest import load_manifest
from shipyard.stamp import Stamp
from shipyard.workspace import Lock, load_workspace

GIT = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t.invalid",
}


def _project(root: Path, folder: str, name: str, deps: list[str]) -> None:
    (root / folder / name.replace("-", "_")).mkdir(parents=True)
    (root / folder / name.replace("-", "_") / "__init__.py").write_text("def main():\n    pass\n")
    listed = ", ".join(f'"{d}"' for d in deps)
    (root / folder / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "1.0"\ndependencies = [{listed}]\n'
    )


def _repo(tmp_path: Path) -> Path:
    """The repository root is a binary's source too (as shipyard's own is), with a
    library `core`, `api` (needs core), two apps on api and one app on nothing."""
    root = tmp_path / "repo"
    _project(root, "libs/core", "core", ["requests>=2"])
    _project(root, "libs/api", "api", ["core"])
    _project(root, "apps/one", "one", ["api"])
    _project(root, "apps/two", "two", ["api", "click"])
    _project(root, "apps/solo", "solo", [])
    _project(root, ".", "top", [])
    (root / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: r, version: git}\n"
        "defaults: {outputs: [wheel, zipapp, image], platforms: [linux/amd64],"
        " image: {base: 'oci-layout:base'}}\nbinaries:\n"
        "  one: {source: apps/one, entrypoint: 'one:main'}\n"
        "  two: {source: apps/two, entrypoint: 'two:main'}\n"
        "  solo: {source: apps/solo, entrypoint: 'solo:main'}\n"
        "  wheel-only: {source: apps/one, entrypoint: 'one:main', outputs: [wheel]}\n"
        "  top: {source: ., entrypoint: 'top:main', outputs: [wheel, zipapp]}\n"
    )
    return root


def _plan(root: Path, **selection: tuple[str, ...]):  # type: ignore[no-untyped-def]
    manifest = load_manifest(root / "binaries.yaml")
    return make_plan(manifest, Selection(**selection), workspace=load_workspace(root))


def test_each_library_is_one_wheel_action_shared_by_its_dependents(tmp_path: Path) -> None:
    plan = _plan(_repo(tmp_path))
    by_id = {a.id: a for a in plan.actions}
    assert [a for a in by_id if a.startswith("wheel:libs/")] == [
        "wheel:libs/api",
        "wheel:libs/core",
    ]
    for binary in ("one", "two"):
        for kind in ("zipapp", "image"):
            action = by_id[f"{kind}:{binary}"]
            # The own wheel first, then the libraries, dependencies first.
            assert action.deps == (f"wheel:apps/{binary}", "wheel:libs/core", "wheel:libs/api")
            assert action.project == binary
    assert by_id["zipapp:solo"].deps == ("wheel:apps/solo",)
    library = by_id["wheel:libs/api"]
    assert library.binaries == () and library.project == "api" and library.names == ("api",)


def test_a_wheel_output_comes_with_its_libraries_wheels(tmp_path: Path) -> None:
    """So `pip install dist/wheels/*.whl` finds every in-repo requirement."""
    plan = _plan(_repo(tmp_path), binaries=("wheel-only",))
    assert [a.id for a in plan.actions] == ["wheel:apps/one", "wheel:libs/api", "wheel:libs/core"]
    solo = _plan(_repo(tmp_path / "b"), binaries=("solo",), outputs=("wheel",))
    assert [a.id for a in solo.actions] == ["wheel:apps/solo"]


def test_the_root_source_leaves_out_nested_projects_and_the_shared_files(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    plan = _plan(root)
    top = {a.id: a for a in plan.actions}["wheel:."]
    nested = {p.relative_to(root).as_posix() for p in top.nested}
    shared = {"binaries.yaml", "uv.lock"}
    assert nested == {"apps/one", "apps/two", "apps/solo", "libs/api", "libs/core"} | shared
    versioned = version_inputs(plan)
    assert versioned["wheel:."] == Inputs(
        ("",),
        ("apps/one", "apps/solo", "apps/two", "libs/api", "libs/core", "binaries.yaml", "uv.lock"),
    )
    # A binary's wheel, zipapp and image share its source and its libraries' folders.
    assert versioned["zipapp:one"] == versioned["wheel:apps/one"] == versioned["image:one"]
    assert versioned["zipapp:one"].include == ("apps/one", "libs/core", "libs/api")


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args],
        cwd=root,
        env={**os.environ, **GIT},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_library_commit_moves_only_its_dependents_versions(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "one")
    _git(root, "tag", "1.0")
    groups = {a: i for a, i in version_inputs(_plan(root)).items()}
    build = Stamp("9.9", _git(root, "rev-parse", "HEAD"), False, 1_700_000_000)
    first = input_stamps(root, build, groups, {})
    assert first["zipapp:one"].version == "1.0" == first["zipapp:solo"].version

    (root / "libs/core/core/__init__.py").write_text("X = 1\n")
    _git(root, "commit", "-qam", "core: x")
    second = input_stamps(root, build, groups, {})
    assert second["zipapp:solo"] == first["zipapp:solo"]  # untouched: the same stamp
    assert second["wheel:."] == first["wheel:."]  # the root leaves the libraries out
    # core, api (which needs core) and both apps (which need api) move on.
    for action in ("zipapp:one", "image:two", "wheel:libs/core", "wheel:libs/api"):
        assert second[action].version.startswith("1.0.1.dev1+g"), action
        assert second[action].revision == _git(root, "rev-parse", "HEAD")

    (root / "apps/solo/solo/__init__.py").write_text("Y = 2\n")  # not committed
    third = input_stamps(root, build, groups, {"SOURCE_DATE_EPOCH": "1700000001"})
    assert third["zipapp:solo"].dirty and third["zipapp:solo"].version == "1.0+dirty"
    assert not third["zipapp:one"].dirty
    assert {s.epoch for s in third.values()} == {1_700_000_001}
    literal = input_stamps(root, build, groups, {}, versioned=False)
    assert {s.version for s in literal.values()} == {"9.9"}
    assert literal["zipapp:one"].revision == second["zipapp:one"].revision


def test_the_wheel_of_the_binarys_project_comes_first(tmp_path: Path) -> None:
    action = {a.id: a for a in _plan(_repo(tmp_path)).actions}["zipapp:one"]

    def wheel(name: str) -> Artifact:
        metadata = Metadata(wheel=Distribution(name, "1.0"))
        return Artifact(
            "wheel", "", "py3-none-any", tmp_path / f"{name}.whl", "0" * 64, 1, metadata
        )

    deps = (wheel("core"), wheel("One"), wheel("api"))
    assert [w.path.stem for w in own_wheels(action, deps)] == ["One", "core", "api"]
    with pytest.raises(ShipyardError, match="one wheel of project one"):
        own_wheels(action, (wheel("core"),))
    with pytest.raises(ShipyardError, match="expected the wheel"):
        own_wheels(dataclasses.replace(action, project=""), deps)


LOCK = """\
version = 1
requires-python = ">=3.11"

[manifest]
members = ["one", "two"]

[[package]]
name = "one"
version = "1.0"
source = {{ editable = "apps/one" }}
dependencies = [{{ name = "alpha" }}]

[[package]]
name = "two"
version = "1.0"
source = {{ editable = "apps/two" }}
dependencies = [{{ name = "beta" }}]

[[package]]
name = "alpha"
version = "{alpha}"
source = {{ registry = "../wheels" }}
wheels = [{{ path = "alpha-{alpha}-py3-none-any.whl", hash = "sha256:{alpha_hash}" }}]

[[package]]
name = "beta"
version = "{beta}"
source = {{ registry = "../wheels" }}
wheels = [{{ path = "beta-{beta}-py3-none-any.whl", hash = "sha256:{beta_hash}" }}]
"""


def test_the_key_follows_the_binarys_slice_of_uv_lock_only(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    plan = _plan(root)
    action = {a.id: a for a in plan.actions}["zipapp:one"]

    def key(alpha: str, beta: str) -> object:
        text = LOCK.format(alpha=alpha, alpha_hash=alpha * 64, beta=beta, beta_hash=beta * 64)
        workspace = dataclasses.replace(
            load_workspace(root), lock=Lock.parse(text, root / "uv.lock")
        )
        ctx = BuildContext(root, root / "dist", Stamp("1", None, False, 0), "3.11", {})
        return lock_inputs(action, dataclasses.replace(ctx, workspace=workspace))

    assert key("1", "1") == key("1", "2")  # beta is two's, not one's
    assert key("1", "1") != key("2", "1")
    without = BuildContext(root, root / "dist", Stamp("1", None, False, 0), "3.11", {})
    assert lock_inputs(action, without) is None


def test_the_last_commits_are_remembered_for_one_head_only(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "one")
    groups = version_inputs(_plan(root))
    memo = tmp_path / "stamps.json"
    head = _git(root, "rev-parse", "HEAD")
    build = Stamp("1", head, False, 1_700_000_000)
    first = input_stamps(root, build, groups, {}, versioned=False, memo=memo)
    data = json.loads(memo.read_text())
    assert data["head"] == head and len(data["last"]) == len(set(groups.values()))
    # What the memo says is believed while HEAD is the same: git log is not asked again.
    data["last"] = {k: ["f" * 40, 1_800_000_000] for k in data["last"]}
    memo.write_text(json.dumps(data))
    again = input_stamps(root, build, groups, {}, versioned=False, memo=memo)
    assert {s.revision for s in again.values()} == {"f" * 40}
    # A new HEAD makes it stale: the real history answers again.
    (root / "apps/solo/solo/__init__.py").write_text("Z = 1\n")
    _git(root, "commit", "-qam", "two")
    moved = Stamp("1", _git(root, "rev-parse", "HEAD"), False, 1_700_000_000)
    later = input_stamps(root, moved, groups, {}, versioned=False, memo=memo)
    assert later["zipapp:one"].revision == first["zipapp:one"].revision == head
    assert later["zipapp:solo"].revision == moved.revision


def test_a_copy_of_a_member_outside_the_workspace_shadows_nothing(tmp_path: Path) -> None:
    """A test fixture holding a copy of a member's pyproject.toml (same name) is no
    duplicate when the root is a uv workspace: the member is the one the name means."""
    root = _repo(tmp_path)
    (root / "pyproject.toml").write_text(
        (root / "pyproject.toml").read_text()
        + '\n[tool.uv.workspace]\nmembers = ["apps/*", "libs/*"]\n'
    )
    _project(root, "tests/fixtures/one", "one", ["nothing-here"])
    plan = _plan(root)
    zipapp = {a.id: a for a in plan.actions}["zipapp:one"]
    assert zipapp.deps == ("wheel:apps/one", "wheel:libs/core", "wheel:libs/api")
