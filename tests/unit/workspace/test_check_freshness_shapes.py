"""Lock freshness on the shapes real workspaces have, side by side with
`uv lock --check --offline` (issue 25 item 2, issue 31 item 6).

Regressions: a root package that is a member and the dependency of example members was
reported stale while uv accepted the lock (the suggested `uv lock` changed nothing, so the
fix looped); members with dynamic requirements were skipped yet "uv.lock up to date" was
printed; a changed root override, a removed root dev-group entry and a changed member
version were current for shipyard and stale for uv.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from shipyard.workspace import WorkspaceError, check_lock, load_workspace
from tests.unit._dynamic import (
    Uv,
    backend_index,
    backend_wheels,
    hooked_workspace,
    offline,
    sdk_workspace,
)
from tests.unit._workspaces import needs_uv

__all__ = ["backend_wheels"]  # the session fixture, used by name

pytestmark = needs_uv


def _edit(path: str, old: str, new: str) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        file = root / path
        text = file.read_text()
        assert old in text, (path, old)
        file.write_text(text.replace(old, new))

    return edit


def _unchanged(root: Path) -> None:
    return None


_CLI_HOOK, _AGENT_HOOK = "apps/cli/hatch_build.py", "apps/agent/hatch_build.py"
_SERVER_A, _SERVER_B = "examples/server-a/pyproject.toml", "examples/server-b/pyproject.toml"
_ROOT = "pyproject.toml"
# shape, edit name, edit
CASES: list[tuple[str, str, Callable[[Path], None]]] = [
    ("hook", "fresh", _unchanged),
    ("hook", "hook drops an extra", _edit(_CLI_HOOK, "acme-agent[evals]", "acme-agent")),
    ("hook", "hook adds a dependency", _edit(_AGENT_HOOK, "'beta'", "'beta', 'gamma'")),
    ("sdk", "fresh", _unchanged),
    ("sdk", "root override changed", _edit(_ROOT, 'gamma==1.0"', 'gamma==2.0"')),
    ("sdk", "root constraint changed", _edit(_ROOT, '"alpha>=1.0"', '"alpha>=0.5"')),
    ("sdk", "root dev-group entry removed", _edit(_ROOT, 'dev = ["delta"]', "dev = []")),
    ("sdk", "member version changed", _edit(_SERVER_A, 'version = "1.0"', 'version = "1.1"')),
    ("sdk", "self-referencing extra changed",
     _edit(_ROOT, 'all = ["acme-sdk[cli]"]', 'all = ["acme-sdk"]')),
    ("sdk", "example's extra of the root changed", _edit(_SERVER_B, "acme-sdk[cli]", "acme-sdk")),
]  # fmt: skip

_SHAPES = {"hook": hooked_workspace, "sdk": sdk_workspace}


@pytest.fixture(scope="module")
def locked(
    tmp_path_factory: pytest.TempPathFactory, backend_wheels: list[Path]
) -> dict[str, tuple[Path, Uv]]:
    top = tmp_path_factory.mktemp("shapes")
    index = backend_index(top / "index", backend_wheels)
    uv = Uv(index, top / "uv-cache")
    made = {}
    for shape, build in _SHAPES.items():
        root = build(top / shape)
        if shape == "sdk":
            _edit(
                "pyproject.toml",
                "[tool.uv]\n",
                '[dependency-groups]\ndev = ["delta"]\n\n[tool.uv]\n',
            )(root)
        uv(root, "lock")
        made[shape] = (root, uv)
    return made


def _verdict(root: Path, env: dict[str, str], ask: bool) -> str:
    try:
        said = check_lock(load_workspace(root), env=env, ask=ask)
    except WorkspaceError:
        return "stale"
    return "unknown" if said.startswith("uv.lock not checked") else "fresh"


@pytest.mark.parametrize(("shape", "name", "edit"), CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_shipyard_agrees_with_uv_lock_check(
    shape: str,
    name: str,
    edit: Callable[[Path], None],
    locked: dict[str, tuple[Path, Uv]],
    tmp_path: Path,
) -> None:
    source, uv = locked[shape]
    root = tmp_path / shape
    shutil.copytree(source, root)
    edit(root)
    uv_says = "fresh" if uv.lock_is_fresh(root) else "stale"
    env = offline(uv.index, uv.cache)
    asking = _verdict(root, env, ask=True)
    alone = _verdict(root, env, ask=False)
    print(f"| {shape} | {name} | {uv_says} | {asking} | {alone} |")  # the table, with -s
    assert asking == uv_says
    # Without uv, the in-process check never contradicts it; it may only say it cannot
    # tell (a member whose requirements only its backend knows).
    assert alone in (uv_says, "unknown")
    if shape == "sdk":
        assert alone == uv_says


def test_a_stale_member_fails_only_the_binaries_that_install_it(
    locked: dict[str, tuple[Path, Uv]], tmp_path: Path
) -> None:
    source, uv = locked["sdk"]
    root = tmp_path / "sdk"
    shutil.copytree(source, root)
    _edit("examples/server-a/pyproject.toml", 'version = "1.0"', 'version = "1.1"')(root)
    env = offline(uv.index, uv.cache)
    for ask in (True, False):
        said = check_lock(load_workspace(root), ["server-b", "acme-sdk"], env=env, ask=ask)
        assert "server-a" in said and "do not install" in said if ask else said
        with pytest.raises(WorkspaceError) as caught:
            check_lock(load_workspace(root), ["server-a", "acme-sdk"], env=env, ask=ask)
        assert caught.value.where.path == root / "examples/server-a/pyproject.toml"
        assert "it records `server-a` 1.0, pyproject.toml says 1.1" in str(caught.value)
