"""shipyard.workspace.lock on locks the real uv writes: slices, check_lock against
`uv lock --check`, and the export that installs with hash checking."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from shipyard.errors import ShipyardError
from shipyard.workspace import Lock, WorkspaceError, check_lock, export_requirements
from shipyard.workspace import load_workspace as load
from tests.unit._workspaces import (
    UV,
    Index,
    Uv,
    needs_uv,
    standard_index,
    uv_env,
    uv_workspace,
)

pytestmark = needs_uv


@pytest.fixture(scope="module")
def uv(tmp_path_factory: pytest.TempPathFactory) -> Uv:
    folder = tmp_path_factory.mktemp("uv")
    return Uv(standard_index(folder / "index"), folder / "cache")


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory, uv: Uv) -> Path:
    """The workspace of _workspaces.uv_workspace, locked, plus a dev-only git dependency
    and an extra of acme-common nobody asks for."""
    root = uv_workspace(tmp_path_factory.mktemp("ws") / "repo", uv)
    devrepo = root.parent / "devtool"
    (devrepo / "src/devtool").mkdir(parents=True)
    (devrepo / "src/devtool/__init__.py").write_text("")
    (devrepo / "pyproject.toml").write_text(
        '[project]\nname = "devtool"\nversion = "0.1"\n[build-system]\n'
        'requires = ["uv_build>=0.13,<0.14"]\nbuild-backend = "uv_build"\n'
    )
    git = ["git", "-C", str(devrepo), "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    subprocess.run(["git", "init", "-q", str(devrepo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    uv(root / "apps/tool", "add", "--no-sync", "--dev", f"devtool @ git+{devrepo.as_uri()}")
    uv(root / "libs/common", "add", "--no-sync", "--optional", "speed", "delta")
    assert "devtool" in (root / "uv.lock").read_text()
    return root


def copy(root: Path, tmp_path: Path) -> Path:
    target = tmp_path / "repo"
    shutil.copytree(root, target)
    return target


def names(lock: Lock, key: str) -> dict[str, str]:
    return {p.name: p.version for p in lock.slice(key)}


def test_the_slice_is_the_runtime_closure_through_members(locked: Path) -> None:
    ws = load(locked)
    assert ws.lock is not None
    assert ws.lock.members == {"acme-common", "acme-tool"}
    # alpha, delta[fast] (so epsilon) directly; beta and gamma through acme-common.
    assert names(ws.lock, "acme-tool") == {
        "alpha": "1.0", "beta": "1.0", "delta": "1.0", "epsilon": "1.0", "gamma": "1.0",
    }  # fmt: skip
    # acme-common's extra `speed` is asked for by no one: delta is not in its slice; the
    # dev group (beta, the git devtool) is never walked.
    assert names(ws.lock, "acme-common") == {"beta": "1.0", "gamma": "1.0"}
    for package in ws.lock.slice("acme-tool"):
        assert package.source == "registry"
        assert len(package.hashes) == 1 and package.hashes[0].startswith("sha256:")
    digest = ws.lock.slice_digest("acme-common")
    assert re.fullmatch("[0-9a-f]{64}", digest)
    assert digest == Lock.load(locked / "uv.lock").slice_digest("acme-common")
    assert digest != ws.lock.slice_digest("acme-tool")


def test_an_old_version_pinned_in_the_lock_is_what_ships(tmp_path: Path) -> None:
    index = standard_index(tmp_path / "index")
    uv = Uv(index, tmp_path / "cache")
    root = uv_workspace(tmp_path / "repo", uv)
    index.add("alpha", "2.0")  # the index now serves a newer alpha
    assert uv.lock_is_fresh(root)
    ws = load(root)
    assert ws.lock is not None and names(ws.lock, "acme-tool")["alpha"] == "1.0"
    installed = install(ws_export(root, tmp_path), index, tmp_path / "target")
    assert installed["alpha"] == "1.0"


def ws_export(root: Path, tmp_path: Path, key: str = "acme-tool") -> Path:
    assert UV is not None
    return export_requirements(load(root), key, tmp_path / "out/requirements.txt", uv=UV)


def install(requirements: Path, index: Index, target: Path) -> dict[str, str]:
    """`uv pip install --require-hashes --no-deps --target` from the wheels folder only;
    the VERSION of each package installed, by name."""
    assert UV is not None
    subprocess.run(
        [UV, "pip", "install", "--require-hashes", "--no-deps", "--no-index", "--offline",
         "--find-links", str(index.wheels), "--target", str(target), "--python",
         shutil.which("python3") or "python3", "-r", str(requirements)],
        check=True, capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin", "UV_CACHE_DIR": str(target.parent / "uvcache")},
    )  # fmt: skip
    found = {}
    for init in target.glob("*/__init__.py"):
        match = re.search(r"VERSION = '(.*)'", init.read_text())
        if match:
            found[init.parent.name] = match[1]
    return found


def test_the_export_installs_with_hashes_and_holds_exactly_the_slice(
    locked: Path, uv: Uv, tmp_path: Path
) -> None:
    root = copy(locked, tmp_path)
    shutil.rmtree(locked.parent / "devtool", ignore_errors=True)  # dev-only: never fetched
    requirements = ws_export(root, tmp_path)
    text = requirements.read_text()
    assert "--hash=sha256:" in text
    for absent in ("acme", "devtool", "file:", "-e ", "git+"):
        assert absent not in text
    pinned = dict(re.findall(r"^([a-z0-9-]+)==(\S+)", text, re.M))
    ws = load(root)
    assert ws.lock is not None
    assert pinned == names(ws.lock, "acme-tool")
    assert install(requirements, uv.index, tmp_path / "target") == pinned
    common = ws_export(root, tmp_path, "acme-common").read_text()
    assert dict(re.findall(r"^([a-z0-9-]+)==(\S+)", common, re.M)) == {
        "beta": "1.0",
        "gamma": "1.0",
    }


def test_a_failing_export_says_what_uv_said(locked: Path, tmp_path: Path) -> None:
    with pytest.raises(ShipyardError, match="uv export of the locked dependencies") as caught:
        ws_export(locked, tmp_path, "no-such-package")
    assert "no-such-package" in str(caught.value).splitlines()[1]  # uv's own words


# Edits as a user makes them, each followed by the same question to uv and to check_lock.
def fresh(root: Path, uv: Uv) -> None:
    """No edit."""


def added_dependency(root: Path, uv: Uv) -> None:
    uv(root / "apps/tool", "add", "--frozen", "gamma")


def changed_specifier(root: Path, uv: Uv) -> None:
    path = root / "libs/common/pyproject.toml"
    path.write_text(path.read_text().replace('"beta>=1.0"', '"beta>=0.9"'))


def equivalent_specifier(root: Path, uv: Uv) -> None:
    path = root / "libs/common/pyproject.toml"
    path.write_text(path.read_text().replace('"beta>=1.0"', '"beta >= 1"'))


def new_member(root: Path, uv: Uv) -> None:
    uv(root, "init", "--lib", "--vcs", "none", "--name", "acme-extra", "libs/extra")


def removed_dependency(root: Path, uv: Uv) -> None:
    uv(root / "libs/common", "remove", "--frozen", "beta")


def changed_group(root: Path, uv: Uv) -> None:
    uv(root / "apps/tool", "add", "--frozen", "--dev", "gamma")


def changed_extra(root: Path, uv: Uv) -> None:
    uv(root / "libs/common", "add", "--frozen", "--optional", "speed", "epsilon")


def marker_as_written_by_hand(root: Path, uv: Uv) -> None:
    """uv records `python_version >= '3.8'` as `python_full_version >= '3.8'`."""
    path = root / "libs/common/pyproject.toml"
    path.write_text(
        path.read_text().replace(
            '"beta>=1.0"', '"beta>=1.0",\n  \'gamma ; python_version >= "3.8"\''
        )
    )
    uv(root, "lock", "--offline")


def changed_marker(root: Path, uv: Uv) -> None:
    marker_as_written_by_hand(root, uv)
    path = root / "libs/common/pyproject.toml"
    path.write_text(path.read_text().replace('python_version >= "3.8"', 'python_version < "3.8"'))


def removed_member(root: Path, uv: Uv) -> None:
    new_member(root, uv)
    uv(root, "lock", "--offline")
    shutil.rmtree(root / "libs/extra")


SCENARIOS: list[tuple[Callable[[Path, Uv], None], str | None]] = [
    (fresh, None),
    (equivalent_specifier, None),
    (marker_as_written_by_hand, None),
    (added_dependency, '"gamma'),
    (changed_specifier, '"beta>=0.9"'),
    (changed_marker, "'gamma ; python_version <"),
    (removed_dependency, "dependencies = ["),
    (changed_group, '"gamma'),
    (changed_extra, '"epsilon'),
    (new_member, "[project]"),
    (removed_member, "members = ["),
]


@pytest.mark.parametrize("asking_uv", [True, False], ids=["uv", "in-process"])
@pytest.mark.parametrize(("edit", "points_at"), SCENARIOS, ids=[s[0].__name__ for s in SCENARIOS])
def test_check_lock_agrees_with_uv_lock_check(
    edit: Callable[[Path, Uv], None],
    points_at: str | None,
    asking_uv: bool,
    locked: Path,
    uv: Uv,
    tmp_path: Path,
) -> None:
    """Side by side with `uv lock --check --offline`: shipyard's verdict asking uv, and
    the in-process verdict it falls back on when uv cannot answer offline."""
    root = copy(locked, tmp_path)
    edit(root, uv)
    uv_says_fresh = uv.lock_is_fresh(root)
    assert uv_says_fresh == (points_at is None), "the scenario is not what it claims"
    ws = load(root)
    env = uv_env(uv.index, uv.cache)
    if points_at is None:
        said = check_lock(ws, env=env, ask=asking_uv)
        assert said.startswith("uv.lock up to date")
        assert ("as read by shipyard" in said) != asking_uv
        return
    with pytest.raises(WorkspaceError, match=r"uv\.lock is out of date") as caught:
        check_lock(ws, env=env, ask=asking_uv)
    where = caught.value.where
    assert where.path.name == "pyproject.toml"
    line = where.path.read_text().splitlines()[where.line - 1]
    assert line[where.col - 1 :].startswith(points_at), (str(caught.value), line)
    assert "run `uv lock`" in str(caught.value)


def test_uv_is_asked_once_per_state_of_the_workspace(locked: Path, uv: Uv, tmp_path: Path) -> None:
    """A no-op build does not run uv again: its verdict is remembered by a digest of what
    it read, and any edit of a pyproject.toml asks again."""
    assert UV is not None
    root = copy(locked, tmp_path)
    calls = tmp_path / "calls"
    wrapper = tmp_path / "uv"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec {UV} "$@"\n')
    wrapper.chmod(0o755)
    memo = tmp_path / "dist" / ".lock-check.json"
    memo.parent.mkdir()
    env = uv_env(uv.index, uv.cache)
    for _ in range(3):
        assert check_lock(load(root), env=env, memo=memo, uv=str(wrapper)) == "uv.lock up to date"
    assert calls.read_text().splitlines() == ["lock --check --offline -v"]
    changed_specifier(root, uv)
    with pytest.raises(WorkspaceError, match="out of date"):
        check_lock(load(root), env=env, memo=memo, uv=str(wrapper))
    assert len(calls.read_text().splitlines()) == 2


def test_a_malformed_lock_names_uv_lock_and_the_place(tmp_path: Path) -> None:
    path = tmp_path / "uv.lock"
    path.write_text('version = 1\n\n[[package]]\nname = "x"\nversion = \n')
    with pytest.raises(WorkspaceError) as caught:
        Lock.load(path)
    assert caught.value.where.path == path and caught.value.where.line == 5
    assert "run `uv lock`" in str(caught.value)
    path.write_text('version = 1\n\n[[package]]\nversion = "1"\n')
    with pytest.raises(WorkspaceError, match="without a name") as caught:
        Lock.load(path)
    assert caught.value.where.line == 3


def test_forked_versions_are_told_apart_by_the_edge(tmp_path: Path) -> None:
    """When resolutions fork, uv.lock holds two versions of a package and each edge names
    the one it means; a slice takes every version any edge reaches."""
    text = """version = 1
revision = 3
requires-python = ">=3.11"

[[package]]
name = "app"
version = "0.1.0"
source = { editable = "." }
dependencies = [
    { name = "alpha", version = "1.0", SOURCE, marker = "sys_platform == 'linux'" },
    { name = "alpha", version = "2.0", SOURCE, marker = "sys_platform != 'linux'" },
]

[[package]]
name = "alpha"
version = "1.0"
source = { registry = "../wheels" }
sdist = { path = "../wheels/alpha-1.0.tar.gz", hash = "sha256:bb" }
wheels = [{ path = "../wheels/alpha-1.0-py3-none-any.whl", hash = "sha256:aa" }]

[[package]]
name = "alpha"
version = "2.0"
source = { registry = "../wheels" }
dependencies = [{ name = "beta" }]

[[package]]
name = "beta"
version = "1.0"
source = { registry = "../wheels" }
"""
    text = text.replace("SOURCE", 'source = { registry = "../wheels" }')
    lock = Lock.parse(text, tmp_path / "uv.lock")
    found = [(p.name, p.version, p.hashes) for p in lock.slice("app")]
    assert found == [("alpha", "1.0", ("sha256:aa", "sha256:bb")), ("alpha", "2.0", ()),
                     ("beta", "1.0", ())]  # fmt: skip
    assert lock.members == {"app"}


def test_an_extra_widens_the_slice_its_digest_and_the_export(locked: Path, tmp_path: Path) -> None:
    ws = load(locked)
    assert ws.lock is not None
    plain = {p.name: p.version for p in ws.lock.slice("acme-common")}
    speed = {p.name: p.version for p in ws.lock.slice("acme-common", ["speed"])}
    assert "delta" not in plain and speed["delta"] == "1.0"
    assert set(plain) < set(speed)
    assert ws.lock.slice_digest("acme-common", ["speed"]) != ws.lock.slice_digest("acme-common")
    assert UV is not None
    out = tmp_path / "speed.txt"
    export_requirements(ws, "acme-common", out, uv=UV, extras=["speed"])
    pinned = dict(re.findall(r"^([a-z0-9-]+)==(\S+)", out.read_text(), re.M))
    assert pinned == speed
