"""Locked packages published only as an sdist are built once into a pure wheel, cached by
the sdist's hash (issue 31, item 3); and the root a manifest's paths belong to."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from shipyard.builders.sdists import LockedSdist, sdist_only, wheel_from_sdist, without
from shipyard.engine.cache.prune import prune_cache
from shipyard.engine.cache.usage import usage
from shipyard.errors import BuildError
from shipyard.process import uv_binary
from tests.unit._dynamic import backend_index, backend_wheels, offline
from tests.unit._nested import htmlish_sdist

__all__ = ["backend_wheels"]  # the session fixture, used by name

_EXPORT = """\
alpha==1.0 \\
    --hash=sha256:aaaa
htmlish==2024.2.26 \\
    --hash=sha256:bbbb
greenlet==3.5.6 ; platform_python_implementation == 'CPython' \\
    --hash=sha256:cccc \\
    --hash=sha256:dddd
"""


def _packages(sdist_hash: str = "sha256:bbbb") -> dict[str, list[dict[str, object]]]:
    return {
        "alpha": [{"name": "alpha", "version": "1.0", "wheels": [{"url": "a.whl"}]}],
        "htmlish": [
            {
                "name": "htmlish",
                "version": "2024.2.26",
                "sdist": {"path": "h.tar.gz", "hash": sdist_hash},
            },
            {
                "name": "htmlish",
                "version": "2023.1",
                "sdist": {"path": "o.tar.gz", "hash": "sha256:eeee"},
            },
        ],
        "greenlet": [
            {
                "name": "greenlet",
                "version": "3.5.6",
                "sdist": {"url": "g.tar.gz", "hash": "sha256:ffff"},
                "wheels": [{"url": "g.whl"}],
            },
        ],
    }


def test_only_the_pinned_version_without_wheels_is_an_sdist_to_build(tmp_path: Path) -> None:
    export = tmp_path / "req.txt"
    export.write_text(_EXPORT)
    found = sdist_only(export, _packages())
    assert found == [LockedSdist("htmlish", "2024.2.26", "h.tar.gz", "bbbb")]


def test_without_drops_the_entry_and_its_hash_lines_only(tmp_path: Path) -> None:
    export = tmp_path / "req.txt"
    export.write_text(_EXPORT)
    without(export, ["htmlish"])
    text = export.read_text()
    assert "htmlish" not in text and "bbbb" not in text
    assert "alpha==1.0 \\\n    --hash=sha256:aaaa\n" in text
    assert "    --hash=sha256:cccc \\\n    --hash=sha256:dddd\n" in text


@pytest.fixture
def built_env(tmp_path: Path, backend_wheels: list[Path]) -> dict[str, str]:
    index = backend_index(tmp_path / "index", backend_wheels)
    return offline(index, tmp_path / "uv-cache")


def test_an_sdist_is_built_once_into_a_pure_wheel_cached_by_its_hash(
    tmp_path: Path, built_env: dict[str, str]
) -> None:
    uv = uv_binary()
    assert uv is not None
    sdist = htmlish_sdist(tmp_path / "files")
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    locked = LockedSdist("htmlish", "2024.2.26", "files/" + sdist.name, digest)
    log = tmp_path / "log.txt"
    wheel = wheel_from_sdist(
        locked, lock_dir=tmp_path, cache=tmp_path / "cache", uv=uv, env=built_env, log=log
    )
    assert wheel.name == "htmlish-2024.2.26-py3-none-any.whl"
    assert wheel.parent == tmp_path / "cache" / "sdist-wheels" / digest
    first = wheel.read_bytes()
    runs = log.read_text().count("$ ")
    sdist.unlink()  # a cached wheel needs no sdist
    again = wheel_from_sdist(
        locked, lock_dir=tmp_path, cache=tmp_path / "cache", uv=uv, env=built_env, log=log
    )
    assert again == wheel and again.read_bytes() == first
    assert log.read_text().count("$ ") == runs, "built again"
    # Built again elsewhere (another machine's cache): the same bytes.
    htmlish_sdist(tmp_path / "files")
    elsewhere = wheel_from_sdist(
        locked, lock_dir=tmp_path, cache=tmp_path / "cache2", uv=uv, env=built_env, log=log
    )
    assert elsewhere.read_bytes() == first
    # `shipyard cache info` counts them; a prune removes them like the other parts.
    found = {p.folder: p for p in usage(tmp_path / "cache").parts}
    assert dict(found["sdist-wheels"].counts) == {"wheels": 1}
    prune_cache(tmp_path / "cache", 0, alone=True)
    assert not list((tmp_path / "cache").rglob("*.whl"))


def test_an_sdist_that_is_not_the_locked_one_is_refused(
    tmp_path: Path, built_env: dict[str, str]
) -> None:
    uv = uv_binary()
    assert uv is not None
    sdist = htmlish_sdist(tmp_path / "files")
    locked = LockedSdist("htmlish", "2024.2.26", sdist.as_uri(), "0" * 64)
    with pytest.raises(BuildError, match=r"uv\.lock records 0{64}.*run `uv lock`"):
        wheel_from_sdist(
            locked, lock_dir=tmp_path, cache=tmp_path / "c", uv=uv, env=built_env,
            log=tmp_path / "log.txt",
        )  # fmt: skip
    assert not list((tmp_path / "c").rglob("*.whl"))


def _native_sdist(folder: Path) -> Path:
    """An sdist whose setup.py compiles a C extension: it builds a platform wheel."""
    import io
    import tarfile

    files = {
        "PKG-INFO": "Metadata-Version: 2.1\nName: cext\nVersion: 1.0\n",
        "pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n'
        'build-backend = "setuptools.build_meta"\n',
        "setup.py": "from setuptools import Extension, setup\n\n"
        "setup(name='cext', version='1.0', ext_modules=[Extension('cext', ['cext.c'])])\n",
        "cext.c": "#include <Python.h>\nstatic struct PyModuleDef m = {PyModuleDef_HEAD_INIT,"
        ' "cext"};\nPyMODINIT_FUNC PyInit_cext(void) { return PyModule_Create(&m); }\n',
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "cext-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"cext-1.0/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture(scope="session")
def setuptools_wheel(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    import subprocess
    import sys

    folder = tmp_path_factory.mktemp("setuptools")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-deps", "-q",
         "--disable-pip-version-check", "-d", str(folder), "setuptools"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.fail(f"pip download setuptools failed:\n{done.stderr}")
    return sorted(folder.glob("*.whl"))


def test_an_sdist_that_builds_a_platform_wheel_is_refused_by_name(
    tmp_path: Path, backend_wheels: list[Path], setuptools_wheel: list[Path]
) -> None:
    uv = uv_binary()
    assert uv is not None
    index = backend_index(tmp_path / "index", [*backend_wheels, *setuptools_wheel])
    env = offline(index, tmp_path / "uv-cache")
    sdist = _native_sdist(tmp_path / "files")
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    locked = LockedSdist("cext", "1.0", sdist.as_uri(), digest)
    with pytest.raises(BuildError) as caught:
        wheel_from_sdist(
            locked, lock_dir=tmp_path, cache=tmp_path / "c", uv=uv, env=env,
            log=tmp_path / "log.txt",
        )  # fmt: skip
    said = str(caught.value)
    assert "cext 1.0 has no wheel in uv.lock, only an sdist" in said
    assert "cext-1.0-cp3" in said and "linux_x86_64.whl" in said
    assert "not for the binary's platforms" in said
    assert not list((tmp_path / "c").rglob("*.whl")), "a refused wheel is not cached"
