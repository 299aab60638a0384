"""PEP 517 build environments made once and reused (issue 28 item 3), offline: hatchling
from a file:// index, through the real uv and the real wheel builder."""

from __future__ import annotations

import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from shipyard.builders.backends import PINS, backend_spec, environment_key
from shipyard.builders.wheel import WheelBuilder
from shipyard.engine.cache.local import BUILD_ENVS
from shipyard.engine.plan import Action
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import BuildContext
from shipyard.stamp import Stamp
from tests.unit._dynamic import backend_index, backend_wheels, offline

__all__ = ["backend_wheels"]  # the session fixture, used by name

EPOCH = 1_700_000_000


def _project(root: Path, requires: str = '"hatchling"') -> Path:
    home = root / "app"
    (home / "src" / "app").mkdir(parents=True)
    (home / "src" / "app" / "__init__.py").write_text("def main():\n    return 0\n")
    (home / "pyproject.toml").write_text(
        '[project]\nname = "app"\nversion = "1.0"\nrequires-python = ">=3.11"\n\n'
        f'[build-system]\nrequires = [{requires}]\nbuild-backend = "hatchling.build"\n\n'
        '[tool.hatch.build.targets.wheel]\npackages = ["src/app"]\n'
    )
    return home


@pytest.fixture
def env(tmp_path: Path, backend_wheels: list[Path]) -> dict[str, str]:
    index = backend_index(tmp_path / "index", backend_wheels)
    return {**offline(index, tmp_path / "uv-cache"), "SHIPYARD_CACHE_DIR": str(tmp_path / "c")}


def _build(root: Path, env: dict[str, str]) -> bytes:
    ctx = BuildContext(root, root / "dist", Stamp("1.0", "abc", False, EPOCH), "3.11", env)
    action = Action("wheel:app", "wheel", ("app",), root / "app")
    (wheel,) = wrapped(WheelBuilder()).run(action, ctx, ()).outputs
    return wheel.path.read_bytes()


def _envs(env: dict[str, str]) -> list[Path]:
    folder = Path(env["SHIPYARD_CACHE_DIR"]) / BUILD_ENVS
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def _log(root: Path) -> str:
    return "".join(p.read_text() for p in sorted((root / "dist" / "logs").glob("*wheel*")))


def test_the_environment_is_made_once_and_gives_the_isolated_builds_bytes(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _build(_project(tmp_path / "one").parent, env)
    (made,) = _envs(env)
    assert (made / PINS).is_file() and "hatchling" in (made / PINS).read_text()
    # Another clone reuses it: no installer runs, and the wheel's bytes repeat.
    again = _build(_project(tmp_path / "two").parent, env)
    assert again == first
    assert _envs(env) == [made]
    log = _log(tmp_path / "two")
    assert "(reused)" in log and "pip install" not in log and " venv " not in log
    # A fresh isolated environment (`python -m build`, as before) builds the same bytes.
    monkeypatch.setattr("shipyard.process.uv_binary", lambda: None)
    isolated = _build(_project(tmp_path / "three").parent, env)
    assert isolated == first
    assert "build environment" not in _log(tmp_path / "three")


def test_a_change_of_requires_gets_its_own_environment(tmp_path: Path, env: dict[str, str]) -> None:
    _build(_project(tmp_path / "one").parent, env)
    _build(_project(tmp_path / "two", '"hatchling>=1"').parent, env)
    assert len(_envs(env)) == 2
    # The same requirements spelled otherwise are the same environment.
    _build(_project(tmp_path / "three", '"Hatchling >= 1"').parent, env)
    assert len(_envs(env)) == 2


def test_a_half_made_environment_is_made_again(tmp_path: Path, env: dict[str, str]) -> None:
    _build(_project(tmp_path / "one").parent, env)
    (made,) = _envs(env)
    (made / PINS).unlink()  # as a build killed while installing leaves it
    shutil.rmtree(next(made.glob("lib/python*/site-packages/hatchling")))
    _build(_project(tmp_path / "two").parent, env)
    assert (made / PINS).is_file()
    assert "pip install" in _log(tmp_path / "two")


def test_concurrent_builds_make_one_environment_and_both_succeed(
    tmp_path: Path, env: dict[str, str]
) -> None:
    roots = [_project(tmp_path / name).parent for name in ("one", "two", "three")]
    with ThreadPoolExecutor(max_workers=3) as pool:
        built = list(pool.map(lambda root: _build(root, env), roots))
    assert built[0] == built[1] == built[2]
    (made,) = _envs(env)
    assert sum(_log(root).count(" venv ") for root in roots) == 1
    done = subprocess.run(
        [str(made / "bin" / "python"), "-c", "import hatchling.build"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_the_key_follows_requires_python_and_index_not_caches() -> None:
    base = {"UV_INDEX_URL": "file:///a", "UV_CACHE_DIR": "/x"}
    key = environment_key(["hatchling"], base)
    assert environment_key(["Hatchling"], base) == key
    assert environment_key(["hatchling"], {**base, "UV_CACHE_DIR": "/y"}) == key
    assert environment_key(["hatchling"], {**base, "HOME": "/elsewhere"}) == key
    assert environment_key(["hatchling>=1.2"], base) != key
    assert environment_key(["hatchling"], {**base, "UV_INDEX_URL": "file:///b"}) != key
    assert environment_key(["hatchling", "hatch-vcs"], base) != key


def test_the_key_names_the_building_python(monkeypatch: pytest.MonkeyPatch) -> None:
    key = environment_key(["hatchling"], {})
    monkeypatch.setattr(sys, "version", sys.version + " other")
    assert environment_key(["hatchling"], {}) != key


def test_build_system_defaults_are_pep_517s() -> None:
    spec = backend_spec({"project": {"name": "x"}})
    assert spec.requires == ("setuptools>=40.8.0",)
    assert spec.backend == "setuptools.build_meta:__legacy__"
    spec = backend_spec(
        {"build-system": {"requires": ["flit_core"], "build-backend": "b", "backend-path": ["."]}}
    )
    assert (spec.requires, spec.backend, spec.paths) == (("flit_core",), "b", (".",))
    with pytest.raises(ValueError, match="requires"):
        backend_spec({"build-system": {"requires": "hatchling"}})
