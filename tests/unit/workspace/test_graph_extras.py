"""Extras are edges of the in-repo graph (shipyard.workspace._graph): a project of the
repository reached through an extra is built from the repository, is one of the binary's
inputs, and `affected` names the binary when it changes.

Regression (security issue, item 4, dependency confusion through extras): the graph read
`[project].dependencies` only, so a library needed only through an extra (the binary's
`extras:`, an extra asked of an in-repo dependency as `acme-lib[x]`, or an extra naming its
own project as `all = ["acme-app[plus]"]`) was left to the installer, which took the
index's copy of that name, and changing it affected nothing.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from shipyard.engine.affected import affected
from shipyard.engine.inputs import version_inputs
from shipyard.engine.plan import Plan, Selection, make_plan
from shipyard.manifest import load_manifest
from shipyard.workspace import WorkspaceError, load_workspace

GIT = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t.invalid",
}


def _project(root: Path, folder: str, name: str, deps: list[str], extras: str = "") -> None:
    module = root / folder / name.replace("-", "_")
    module.mkdir(parents=True)
    (module / "__init__.py").write_text("def main() -> None: ...\n")
    listed = ", ".join(f'"{d}"' for d in deps)
    optional = f"[project.optional-dependencies]\n{extras}" if extras else ""
    (root / folder / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "1.0"\ndependencies = [{listed}]\n{optional}'
    )


def _repo(tmp_path: Path) -> Path:
    """`acme-app` with extras `plus` (acme-extra), `all` (itself with plus, spelled as
    people do) and `fast` (acme-lib with its extra `x`, which needs acme-deep); binaries:
    `plain` (no extras), `plus`, `all`, `fast`. Committed."""
    root = tmp_path / "repo"
    _project(
        root, "apps/app", "acme-app", ["requests>=2"],
        'plus = ["acme-extra>=1"]\nall = ["Acme_App[PLUS]"]\nfast = ["acme-lib[X]"]\n',
    )  # fmt: skip
    _project(root, "libs/extra", "acme-extra", [])
    _project(root, "libs/lib", "acme-lib", [], 'x = ["acme-deep"]\n')
    _project(root, "libs/deep", "acme-deep", [])
    lines = [
        "schema: 1",
        "project: {name: r, version: git}",
        "defaults: {outputs: [wheel, zipapp], platforms: [linux/amd64]}",
        "binaries:",
        "  plain: {source: apps/app, entrypoint: 'acme_app:main'}",
    ]
    for extra in ("plus", "all", "fast"):
        lines.append(
            f"  {extra}: {{source: apps/app, entrypoint: 'acme_app:main', extras: [{extra}]}}"
        )
    (root / "binaries.yaml").write_text("\n".join(lines) + "\n")
    for args in (("init", "-q"), ("add", "-A"), ("commit", "-qm", "one")):
        subprocess.run(["git", *args], cwd=root, env=GIT, check=True, capture_output=True)
    return root


def _plan(root: Path, binary: str) -> Plan:
    manifest = load_manifest(root / "binaries.yaml", env={})
    return make_plan(manifest, Selection(binaries=(binary,)), workspace=load_workspace(root))


def _zipapp_deps(root: Path, binary: str) -> list[str]:
    (zipapp,) = [a for a in _plan(root, binary).actions if a.kind == "zipapp"]
    return list(zipapp.deps)


@pytest.mark.parametrize(
    ("binary", "libraries"),
    [
        ("plain", []),
        ("plus", ["wheel:libs/extra"]),  # the binary's own extra
        ("all", ["wheel:libs/extra"]),  # an extra naming its own project's extra
        ("fast", ["wheel:libs/deep", "wheel:libs/lib"]),  # an extra asked of a library
    ],
)
def test_a_library_reached_through_an_extra_is_built_from_the_repository(
    tmp_path: Path, binary: str, libraries: list[str]
) -> None:
    """Bug: only `[project].dependencies` were edges, so these libraries were not built
    and the installer took an index's copy of their names."""
    root = _repo(tmp_path)
    deps = _zipapp_deps(root, binary)
    assert deps[0] == "wheel:apps/app"
    assert sorted(deps[1:]) == libraries
    # Each is one of the binary's versioned inputs.
    inputs = version_inputs(_plan(root, binary))
    assert sorted(inputs[f"zipapp:{binary}"].include) == sorted(
        ["apps/app", *(d.removeprefix("wheel:") for d in libraries)]
    )
    # The wheel all four binaries share is versioned by what any of them installs,
    # whichever is selected.
    wheel = sorted(inputs["wheel:apps/app"].include)
    assert wheel == ["apps/app", "libs/deep", "libs/extra", "libs/lib"]


def test_the_graph_has_an_edge_for_every_extra(tmp_path: Path) -> None:
    """The closure follows the extras asked, no others; dependents see through extras."""
    ws = load_workspace(_repo(tmp_path), strict=True)
    app = ws.projects["acme-app"]
    assert app.in_repo == () and app.extras == ("all", "fast", "plus")

    def keys(*extras: str) -> list[str]:
        return [p.key for p in ws.closure("acme-app", extras)]

    assert keys() == []
    assert keys("plus") == keys("PLUS") == keys("all") == ["acme-extra"]
    assert sorted(keys("fast")) == ["acme-deep", "acme-lib"]
    assert sorted(keys("fast", "plus")) == ["acme-deep", "acme-extra", "acme-lib"]
    assert keys("undeclared") == []
    assert ws.closure("acme-lib") == () and ws.closure("acme-lib", ["x"])[0].key == "acme-deep"
    assert ws.dependents("acme-deep") == ("acme-app", "acme-lib")
    assert ws.dependents("acme-extra") == ("acme-app",)


def test_affected_names_the_binaries_whose_extras_reach_the_changed_library(
    tmp_path: Path,
) -> None:
    """Bug: changing a library reached only through an extra affected nothing."""
    root = _repo(tmp_path)
    manifest = load_manifest(root / "binaries.yaml", env={})
    (root / "libs/extra/acme_extra/__init__.py").write_text("X = 2\n")
    (root / "libs/deep/acme_deep/__init__.py").write_text("X = 2\n")
    found = {a.binary: a.reasons for a in affected(manifest, load_workspace(root), "HEAD", env={})}
    assert sorted(found) == ["all", "fast", "plus"]
    assert [(r.path, r.via) for r in found["plus"]] == [
        ("libs/extra/acme_extra/__init__.py", ("acme-extra",))
    ]
    assert [(r.path, r.via) for r in found["fast"]] == [
        ("libs/deep/acme_deep/__init__.py", ("acme-lib", "acme-deep"))
    ]


def test_a_cycle_through_extras_is_named_and_one_within_a_project_is_not_a_cycle(
    tmp_path: Path,
) -> None:
    """Extras may name each other within a project (all -> plus -> all); a project that
    needs itself through another project's extra is a cycle, named with the extras."""
    root = tmp_path / "repo"
    _project(root, "a", "a", [], 'x = ["b[y]"]\nall = ["a[more]"]\nmore = ["a[all]", "c"]\n')
    _project(root, "b", "b", [], 'y = ["a[x]"]\n')
    _project(root, "c", "c", [])
    ws = load_workspace(root)
    assert [p.key for p in ws.closure("a", ["all"])] == ["c"]
    with pytest.raises(WorkspaceError) as caught:
        ws.closure("a", ["x"])
    assert "dependency cycle: a[x] -> b[y] -> a[x]" in str(caught.value)
    assert str(caught.value).startswith("b/pyproject.toml:6:")
