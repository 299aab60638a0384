"""The in-repo graph of members whose requirements are dynamic comes from the authorities:
uv.lock where it records the member, else the member's PEP 517 backend, cached by the
member's files.

Regression (issue 25, item 1): members declaring `dynamic = ["dependencies",
"optional-dependencies"]` filled by a hatch metadata hook had no in-repo edges (the graph
read `[project].dependencies` only), so binaries shipped the index's copies of the
repository's libraries and `affected` said nothing after a library edit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shipyard.workspace import WorkspaceError, load_workspace
from tests.unit._dynamic import (
    Uv,
    backend_index,
    backend_wheels,
    git_commit,
    hooked_workspace,
    offline,
)
from tests.unit._workspaces import needs_uv

__all__ = ["backend_wheels"]  # the session fixture, used by name

pytestmark = needs_uv

_BROKEN = {"UV_INDEX_URL": "http://127.0.0.1:9/simple", "UV_OFFLINE": "1"}


def _keys(projects: tuple[object, ...]) -> list[str]:
    return [p.key for p in projects]  # type: ignore[attr-defined]


def _graph_facts(root: Path, **kwargs: object) -> dict[str, object]:
    ws = load_workspace(root, **kwargs)  # type: ignore[arg-type]
    return {
        "from": {k: p.requirements_from for k, p in sorted(ws.projects.items())},
        "agent": _keys(ws.closure("acme-agent")),
        "agent[evals]": _keys(ws.closure("acme-agent", ["evals"])),
        "agent[all]": _keys(ws.closure("acme-agent", ["all"])),
        "cli": _keys(ws.closure("acme-cli")),
        "users of evals": ws.dependents("acme-evals"),
        "users of core": ws.dependents("acme-core"),
        "agent extras": ws.projects["acme-agent"].extras,
    }


_EXPECTED = {
    "agent": ["acme-core"],
    "agent[evals]": ["acme-core", "acme-evals"],
    "agent[all]": ["acme-core", "acme-evals"],
    "cli": ["acme-core", "acme-agent", "acme-evals"],
    "users of evals": ("acme-agent", "acme-cli"),
    "users of core": ("acme-agent", "acme-cli"),
    "agent extras": ("all", "evals"),
}


@pytest.fixture
def repo(tmp_path: Path, backend_wheels: list[Path]) -> tuple[Path, dict[str, str], Uv]:
    index = backend_index(tmp_path / "index", backend_wheels)
    cache = tmp_path / "uv-cache"
    return hooked_workspace(tmp_path / "repo"), offline(index, cache), Uv(index, cache)


def test_without_a_lock_the_backend_tells_and_is_asked_once(
    repo: tuple[Path, dict[str, str], Uv], tmp_path: Path
) -> None:
    root, env, _ = repo
    cache = tmp_path / "metadata"
    facts = _graph_facts(root, cache_dir=cache, env=env)
    assert facts.pop("from") == {
        "acme": "pyproject.toml", "acme-agent": "backend", "acme-cli": "backend",
        "acme-core": "pyproject.toml", "acme-evals": "pyproject.toml",
    }  # fmt: skip
    assert facts == _EXPECTED
    assert len(list(cache.glob("*.json"))) == 2  # one answer per hooked member
    # Warm: an environment in which the backend cannot even be installed changes nothing.
    broken = {**env, **_BROKEN}
    warm = _graph_facts(root, cache_dir=cache, env=broken)
    warm.pop("from")
    assert warm == _EXPECTED
    # Cold with that environment: the backend's failure is the member's problem.
    ws = load_workspace(root, cache_dir=tmp_path / "other", env=broken)
    with pytest.raises(WorkspaceError) as caught:
        ws.closure("acme-cli")
    text = str(caught.value)
    assert "apps/agent/pyproject.toml:5:" in text or "apps/cli/pyproject.toml:5:" in text
    assert "PEP 517 backend could not give its metadata" in text
    assert ws.closure("acme-core") == ()  # the static members are unaffected


def test_an_edit_to_the_hook_is_a_new_answer(
    repo: tuple[Path, dict[str, str], Uv], tmp_path: Path
) -> None:
    root, env, _ = repo
    cache = tmp_path / "metadata"
    assert _graph_facts(root, cache_dir=cache, env=env)["cli"] == _EXPECTED["cli"]
    hook = root / "apps/cli/hatch_build.py"
    hook.write_text(hook.read_text().replace("['acme-agent[evals]']", "['acme-agent']"))
    ws = load_workspace(root, cache_dir=cache, env=env)
    assert _keys(ws.closure("acme-cli")) == ["acme-core", "acme-agent"]
    assert ws.dependents("acme-evals") == ("acme-agent",)


def test_with_a_lock_the_lock_tells_and_no_backend_runs(
    repo: tuple[Path, dict[str, str], Uv], tmp_path: Path
) -> None:
    root, env, uv = repo
    uv(root, "lock")
    # The backend could not run at all: the lock is the only possible source.
    facts = _graph_facts(root, cache_dir=tmp_path / "metadata", env={**env, **_BROKEN})
    assert facts.pop("from") == {
        "acme": "pyproject.toml", "acme-agent": "uv.lock", "acme-cli": "uv.lock",
        "acme-core": "pyproject.toml", "acme-evals": "pyproject.toml",
    }  # fmt: skip
    assert facts == _EXPECTED
    assert not (tmp_path / "metadata").exists()


def test_affected_names_every_binary_shipping_an_edited_library(
    repo: tuple[Path, dict[str, str], Uv], tmp_path: Path
) -> None:
    root, env, uv = repo
    uv(root, "lock")
    (root / "uv.lock").rename(tmp_path / "uv.lock")  # the backend path: no lock
    (root / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: acme, version: git}\nbinaries:\n"
        "  agent: {source: apps/agent, entrypoint: 'acme_agent:main', outputs: [zipapp],"
        " extras: [evals]}\n"
        "  agent-plain: {source: apps/agent, entrypoint: 'acme_agent:main', outputs: [zipapp]}\n"
        "  cli: {source: apps/cli, entrypoint: 'acme_cli:main', outputs: [zipapp]}\n"
        "  core-only: {source: libs/core, entrypoint: 'acme_core:NAME', outputs: [wheel]}\n"
    )
    git_commit(root)
    init = root / "libs/evals/src/acme_evals/__init__.py"
    init.write_text(init.read_text() + "CHANGED = True\n")
    git_commit(root, "evals")
    run_env = {**env, "SHIPYARD_CACHE_DIR": str(tmp_path / "shipyard-cache"), "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "shipyard", "affected", "--since=HEAD~1"],
        cwd=root, env=run_env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = sorted(done.stdout.splitlines())
    # agent-plain installs acme-agent without `evals`: acme-evals is not in it.
    assert [line.split(":")[0] for line in lines] == ["agent", "cli"], done.stdout
    assert "(through acme-agent -> acme-evals)" in done.stdout
    assert os.path.isdir(tmp_path / "shipyard-cache" / "metadata")
