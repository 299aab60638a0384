"""A zipapp runs where it can and says in one line why it cannot (issue 18, item 11).

(a) A zipapp started by a user whose home is not writable (a service account such
as `nobody`, HOME=/nonexistent) exited 2 ("cannot unpack native code into ..."):
it now unpacks its site into a private temporary folder, removed at exit, after one
warning line naming the cache folder it could not use. Pure and native sites alike:
both run from an unpacked site.

(b) Python 2.7 and 3.6 got a SyntaxError traceback: __main__.py handed them the
bootstrap, which needs 3.7. __main__.py now compiles on every Python from 2.7 on
and refuses an older one with check_target's one line, exit status 2, before it
reads anything else of the archive. Without an old Python here, the archive's
__main__.py is checked against Python 2/3.0 grammar and run with the version the
interpreter reports faked, from an archive that holds no bootstrap at all; with a
python2.7/python3.6 on PATH, the archive is also run by it for real.
"""

from __future__ import annotations

import ast
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.builders.zipapp import _boot as boot
from shipyard.builders.zipapp._boot.cache import PRIVATE_PREFIX
from shipyard.builders.zipapp._boot.layout import BUILD_INFO
from tests.integration._repo import copy_worktree, shipyard
from tests.integration.conftest import require_services
from tests.unit.builders.zipapp.boot.test_boot import make_pyz

NOBODY = 65534
APP = "def main():\n    print('file', __file__)\n"
NATIVE: dict[str, str | bytes] = {"app/__init__.py": APP, "app/_speedups.so": b"\x7fELF"}
PURE: dict[str, str | bytes] = {"app/__init__.py": APP}
HERE = "{}.{}".format(*sys.version_info[:2])


# --- (a) a home that is not writable -------------------------------------------------


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder `nobody` can read (pytest's own is private to root), removed afterwards."""
    if os.geteuid() != 0:
        message = "needs root to run a zipapp as a second local user"
        if require_services():
            pytest.fail(message)
        pytest.skip(message)
    folder = Path(tempfile.mkdtemp(prefix="shipyard-zipapp-fallback-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def _system_python() -> tuple[str, str]:
    """A Python `nobody` can run (sys.executable may lie in root's home), and its X.Y."""
    python = shutil.which("python3", path="/usr/bin:/usr/local/bin") or sys.executable
    version = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return python, version


def _as_nobody(
    python: str, pyz: Path, home: str, temp: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """Run the archive as `nobody` with HOME=`home`, the cache left at its default."""
    env = {k: v for k, v in os.environ.items() if k not in (boot.ROOT_ENV, "XDG_CACHE_HOME")}
    env.update(HOME=home, TMPDIR=str(temp), USER="nobody", LOGNAME="nobody")
    return subprocess.run(
        [python, str(pyz), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
    )


@pytest.mark.integration
@pytest.mark.parametrize("files", [NATIVE, PURE], ids=["native", "pure"])
@pytest.mark.parametrize("home", ["/nonexistent", "root-owned 0755 folder"])
def test_the_site_falls_back_to_a_private_temporary_folder_when_home_is_not_writable(
    shared: Path, home: str, files: dict[str, str | bytes]
) -> None:
    python, version = _system_python()
    pyz = make_pyz(shared, files, python=version)
    pyz.chmod(0o755)
    if home != "/nonexistent":
        folder = shared / "home"
        folder.mkdir(mode=0o755)  # root's, as /home/<user> of a system account may be
        home = str(folder)
    temp = shared / "tmp"
    temp.mkdir()
    temp.chmod(0o1777)
    done = _as_nobody(python, pyz, home, temp)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    cache = os.path.join(home, ".cache", "shipyard", "zipapps")
    assert lines[0].startswith(f"app: warning: cannot write the zipapp cache in {cache} ("), lines
    assert "private temporary folder" in lines[0]
    assert f"set {boot.ROOT_ENV}" in lines[0]
    # Imported from a private folder under TMPDIR, removed when the process ended.
    said = done.stdout.strip()
    assert said.startswith(f"file {temp}{os.sep}{PRIVATE_PREFIX}"), said
    assert said.endswith(os.path.join("site", "app", "__init__.py"))
    assert os.listdir(temp) == []
    assert not os.path.exists(cache)


@pytest.mark.integration
def test_the_mesh_agent_zipapp_built_by_the_cli_runs_as_nobody_without_a_home(
    shared: Path, tmp_path: Path
) -> None:
    """End to end: mesh-agent ships PyYAML's compiled extension, unpacked at start."""
    root = copy_worktree(tmp_path / "repo")
    done = shipyard(root, "build", "--binary=mesh-agent", "--output=zipapp")
    assert done.returncode == 0, done.stderr[-3000:]
    machine = "arm64" if os.uname().machine in ("aarch64", "arm64") else "amd64"
    (built,) = (root / "dist" / "zipapps").glob(f"mesh-agent-*-linux_{machine}.pyz")
    with zipfile.ZipFile(built) as archive:
        assert any(name.endswith(".so") for name in archive.namelist())
    pyz = shared / built.name
    shutil.copyfile(built, pyz)
    pyz.chmod(0o644)
    temp = shared / "tmp"
    temp.mkdir()
    temp.chmod(0o1777)
    python, _ = _system_python()
    ran = _as_nobody(python, pyz, "/nonexistent", temp, "--version")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("mesh-agent ")
    (line,) = ran.stderr.splitlines()
    assert line.startswith("mesh-agent: warning: cannot write the zipapp cache in /nonexistent/")
    assert os.listdir(temp) == []


def test_an_unwritable_root_named_by_the_variable_is_still_an_error(tmp_path: Path) -> None:
    """What the user asked for explicitly is not replaced behind their back."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    pyz = make_pyz(tmp_path, NATIVE)
    env = {**os.environ, boot.ROOT_ENV: str(blocker / "zipapps")}
    done = subprocess.run(
        [sys.executable, str(pyz)], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"app: cannot unpack the zipapp into {blocker / 'zipapps'}")
    assert len(done.stderr.splitlines()) == 1


# --- (b) a Python older than the bootstrap --------------------------------------------


def _main_py(pyz: Path) -> str:
    with zipfile.ZipFile(pyz) as archive:
        return archive.read("__main__.py").decode()


# Python 3 syntax that Python 2.7 cannot compile, by AST node.
_PY3_ONLY = (
    ast.AnnAssign,
    ast.AsyncFunctionDef,
    ast.Await,
    ast.JoinedStr,
    ast.NamedExpr,
    ast.Nonlocal,
    ast.Starred,
    ast.YieldFrom,
)


def _python3_only(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, _PY3_ONLY):
            found.append(f"line {line}: {type(node).__name__}")
        elif isinstance(node, ast.FunctionDef) and (
            node.returns
            or node.args.kwonlyargs
            or node.args.posonlyargs
            or any(a.annotation for a in node.args.args)
        ):
            found.append(f"line {line}: annotations or keyword-only arguments")
        elif isinstance(node, ast.Raise) and node.cause is not None:
            found.append(f"line {line}: raise ... from")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "print":
            found.append(f"line {line}: print()")  # a statement in 2.7, a tuple with commas
    return found


def test_main_py_compiles_on_python_2_7_and_3_0(tmp_path: Path) -> None:
    main = _main_py(make_pyz(tmp_path, {"app/__init__.py": APP}))
    # Python 3.0 grammar (no f-strings, walrus, async, matrix product, ...).
    tree = ast.parse(main, feature_version=(3, 0))
    assert _python3_only(tree) == []
    # Python 2 grammar: lib2to3's has the print and exec statements.
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from lib2to3 import pygram, pytree
            from lib2to3.pgen2 import driver
    except ImportError:  # removed in Python 3.13
        return
    driver.Driver(pygram.python_grammar, convert=pytree.convert).parse_string(main)
    # The version check comes first: only `import sys` before it.
    first, check = tree.body[:2]
    assert isinstance(first, ast.Import) and [a.name for a in first.names] == ["sys"]
    assert isinstance(check, ast.If) and "sys.version_info < (3, 7)" in ast.unparse(check.test)


# Run as that Python would: the version it reports faked before __main__.py runs.
FAKE = """\
import runpy, sys
sys.version_info = tuple(int(p) for p in sys.argv[2].split(".")) + ("final", 0)
runpy.run_path(sys.argv[1], run_name="__main__")
"""


def _without_bootstrap(pyz: Path) -> Path:
    """A copy of the archive holding only __main__.py and the build info: an old Python
    must get its answer without compiling (or even reading) anything else."""
    bare = pyz.with_name("bare.pyz")
    with zipfile.ZipFile(pyz) as source, zipfile.ZipFile(bare, "w") as target:
        for name in ("__main__.py", BUILD_INFO):
            target.writestr(name, source.read(name))
    return bare


@pytest.mark.parametrize("old", ["2.7.18", "3.6.15"])
def test_an_old_python_gets_one_line_and_exit_2(tmp_path: Path, old: str) -> None:
    pyz = _without_bootstrap(make_pyz(tmp_path, {"app/__init__.py": APP}, python="3.11"))
    done = subprocess.run(
        [sys.executable, "-c", FAKE, str(pyz), old], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr == (
        f"app: built for Python 3.11, but this is Python {old} ({sys.executable}); "
        "run it with python3.11\n"
    )


def test_the_bootstrap_itself_still_runs_on_the_oldest_python_it_admits(tmp_path: Path) -> None:
    """3.7 passes __main__.py's check, so the bootstrap must compile there: check_target
    then refuses it (a 3.11 archive) with the same line."""
    for module in Path(boot.__file__).parent.glob("*.py"):  # every module of the bootstrap
        ast.parse(module.read_text(), feature_version=(3, 7))
    pyz = make_pyz(tmp_path, {"app/__init__.py": APP}, python="3.99")
    done = subprocess.run(
        [sys.executable, "-c", FAKE, str(pyz), "3.7.17"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, boot.ROOT_ENV: str(tmp_path / "cache")},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("app: built for Python 3.99, but this is Python 3.7 (")


def _real_python(name: str) -> str | None:
    """An interpreter `name` that really runs (on PATH, or one pyenv installed), or None."""
    found = shutil.which(name)
    candidates = [found] if found else []
    candidates += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/*/bin/{name}")))
    for python in candidates:
        done = subprocess.run([python, "-c", "import sys"], capture_output=True, check=False)
        if done.returncode == 0:  # not a shim that cannot find it
            return python
    return None


@pytest.mark.parametrize(
    ("old", "version"), [("python2.7", "2.7"), ("python3.6", "3.6"), ("python3.7", "3.7")]
)
def test_a_real_old_python_gets_one_line_and_exit_2(tmp_path: Path, old: str, version: str) -> None:
    python = _real_python(old)
    if python is None:
        pytest.skip(f"no {old} on this machine")
    pyz = make_pyz(tmp_path, NATIVE, python=HERE)
    env = {**os.environ, boot.ROOT_ENV: str(tmp_path / "cache")}
    done = subprocess.run([python, str(pyz)], capture_output=True, text=True, check=False, env=env)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"app: built for Python {HERE}, but this is Python {version}")
    assert lines[0].endswith(f"run it with python{HERE}")
    assert not (tmp_path / "cache").exists()  # refused before anything was unpacked
