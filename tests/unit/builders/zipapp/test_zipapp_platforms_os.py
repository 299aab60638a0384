"""Issue 15, item 1: zipapps for macOS and Windows (darwin/windows, amd64/arm64).

The manifest takes the four platforms for zipapps and refuses them for images; the
resolver asks the installers for their wheel tags (offline, real uv and pip, local
wheels); the bootstrap's OS logic runs as darwin and windows here, the OS faked at
its one seam, `_boot._os()` (in a child process, through the sys.platform it reads).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shipyard.builders import resolve as resolving
from shipyard.builders.resolve import Distribution, resolve
from shipyard.builders.zipapp import DEFAULT_SHEBANG, launcher, launcher_name, layout, write_archive
from shipyard.builders.zipapp import _boot as boot
from shipyard.errors import ManifestError, ShipyardError
from shipyard.manifest import IMAGE_PLATFORMS, PLATFORMS, json_schema, load_manifest
from shipyard.manifest._cached import manifest_from_json, manifest_to_json
from tests.unit.builders.test_resolve import make_wheel, offline_env
from tests.unit.builders.zipapp.test_zipapp_boot import HERE, build_id

OS_PLATFORMS = ("darwin/amd64", "darwin/arm64", "windows/amd64", "windows/arm64")
SIX = ("linux/amd64", "linux/arm64", *OS_PLATFORMS)


# --- the manifest ----------------------------------------------------------------------


def _manifest(tmp_path: Path, text: str) -> Path:
    (tmp_path / ".git").mkdir(exist_ok=True)
    (tmp_path / "app").mkdir(exist_ok=True)
    (tmp_path / "app" / "pyproject.toml").write_text('[project]\nname = "app"\nversion = "1"\n')
    path = tmp_path / "binaries.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def _problems(path: Path) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        load_manifest(path, {})
    assert caught.value.exit_code == 2
    return str(caught.value).splitlines()


def test_the_four_os_platforms_are_platforms_but_not_image_platforms() -> None:
    assert set(OS_PLATFORMS) <= set(PLATFORMS)
    assert not set(OS_PLATFORMS) & set(IMAGE_PLATFORMS)
    assert all(p.startswith("linux/") for p in IMAGE_PLATFORMS)
    schema = json.dumps(json_schema())
    assert all(p in schema for p in OS_PLATFORMS)


def test_a_zipapp_and_a_wheel_may_be_built_for_macos_and_windows(tmp_path: Path) -> None:
    path = _manifest(
        tmp_path,
        f"""\
        schema: 1
        project: {{name: t}}
        binaries:
          cli:
            source: app
            entrypoint: app:main
            outputs: [wheel, zipapp]
            platforms: [{", ".join(SIX)}]
          both:
            source: app
            entrypoint: app:main
            outputs: [zipapp, image]
            platforms: [{", ".join(SIX)}]
            image: {{platforms: [linux/amd64, linux/arm64]}}
        """,
    )
    manifest = load_manifest(path, {})
    assert manifest.binaries["cli"].platforms == SIX
    assert manifest.binaries["both"].platforms == SIX
    assert manifest.binaries["both"].image.platforms == ("linux/amd64", "linux/arm64")
    assert manifest_from_json(manifest_to_json(manifest)) == manifest


def test_an_image_for_macos_or_windows_is_a_manifest_error_naming_the_fix(
    tmp_path: Path,
) -> None:
    path = _manifest(
        tmp_path,
        """\
        schema: 1
        project: {name: t}
        defaults:
          platforms: [linux/amd64, darwin/arm64]
        binaries:
          fromdefaults:
            source: app
            entrypoint: app:main
            outputs: [zipapp, image]
          own:
            source: app
            entrypoint: app:main
            outputs: [image]
            platforms: [windows/amd64, darwin/arm64]
          zipapponly:
            source: app
            entrypoint: app:main
            outputs: [zipapp]
        """,
    )
    problems = _problems(path)
    assert problems == [
        f"{path}:4:14: binaries.fromdefaults.image.platforms: fromdefaults's image would be "
        "built for darwin/arm64, but images are Linux only (macOS and Windows are zipapp "
        "platforms) (set image.platforms to the Linux ones, e.g. [linux/amd64])",
        f"{path}:14:16: binaries.own.image.platforms: own's image would be built for "
        "windows/amd64, darwin/arm64, but images are Linux only (macOS and Windows are "
        "zipapp platforms) (set image.platforms to the Linux ones, e.g. "
        "[linux/amd64, linux/arm64])",
    ]


def test_image_platforms_take_linux_platforms_only(tmp_path: Path) -> None:
    path = _manifest(
        tmp_path,
        """\
        schema: 1
        project: {name: t}
        binaries:
          cli:
            source: app
            entrypoint: app:main
            outputs: [zipapp, image]
            platforms: [linux/amd64, windows/amd64]
            image: {platforms: [linux/amd64, windows/amd64]}
        """,
    )
    assert _problems(path) == [
        f"{path}:9:38: binaries.cli.image.platforms[1]: 'windows/amd64' is not allowed "
        "(images are Linux only (macOS and Windows are zipapp platforms): list Linux "
        "platforms here, e.g. linux/amd64, linux/arm64)"
    ]


# --- resolution for the platforms' wheel tags (offline, local wheels) ------------------

CP = "cp311-cp311"


@pytest.fixture
def os_links(tmp_path: Path) -> Path:
    """Native `fast` wheels: macOS arm64 (11.0) and x86_64 (10.9), a newer macOS 12 arm64
    one (too new for macOS 11, not for uv's default of 13), and Windows amd64; `uni`
    only as universal2; pure `helper`."""
    folder = tmp_path / "links"
    make_wheel(folder, "helper", "2.0", files={"helper/__init__.py": "X = 1\n"})
    for tag, ext in (
        ("macosx_11_0_arm64", "cpython-311-darwin.so"),
        ("macosx_10_9_x86_64", "cpython-311-darwin.so"),
        ("win_amd64", "cp311-win_amd64.pyd"),
    ):
        make_wheel(
            folder, "fast", "1.5", f"{CP}-{tag}", {"fast/__init__.py": "", f"fast/_c.{ext}": tag}
        )
    make_wheel(
        folder,
        "fast",
        "1.6",
        f"{CP}-macosx_12_0_arm64",
        {"fast/__init__.py": "", "fast/_c.cpython-311-darwin.so": "macosx_12_0_arm64"},
    )
    make_wheel(
        folder,
        "uni",
        "1.0",
        f"{CP}-macosx_10_9_universal2",
        {"uni/__init__.py": "", "uni/_u.cpython-311-darwin.so": "universal2"},
    )
    return folder


def _app(tmp_path: Path, *requires: str) -> Path:
    files = {"app/__init__.py": "def main():\n    return 0\n"}
    return make_wheel(tmp_path / "wheels", "app", "1.0", files=files, requires=requires)


def _tag(site: Path, name: str) -> str:
    wheel = next(site.glob(f"{name}-*.dist-info")) / "WHEEL"
    return next(ln for ln in wheel.read_text().splitlines() if ln.startswith("Tag:"))[5:]


@pytest.fixture(params=["uv", "pip"])
def installer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each installer in turn: uv, and pip's --platform path (uv hidden)."""
    if request.param == "pip":
        monkeypatch.setattr(resolving, "uv_binary", lambda: None)
    elif resolving.uv_binary() is None:
        pytest.fail("uv is a dependency of shipyard's test environment")
    return str(request.param)


@pytest.mark.parametrize(
    ("platform", "tag", "version"),
    [
        ("darwin/arm64", f"{CP}-macosx_11_0_arm64", "1.5"),  # 1.6 needs macOS 12
        ("darwin/amd64", f"{CP}-macosx_10_9_x86_64", "1.5"),
        ("windows/amd64", f"{CP}-win_amd64", "1.5"),
    ],
)
def test_native_wheels_are_resolved_for_macos_11_and_windows(
    tmp_path: Path, os_links: Path, installer: str, platform: str, tag: str, version: str
) -> None:
    site = tmp_path / "site"
    found = resolve(
        _app(tmp_path, "fast"),
        platform,
        "3.11",
        site,
        env=offline_env(tmp_path, os_links),
        log=tmp_path / "log.txt",
    )
    assert not found.pure
    assert Distribution("fast", version, False) in found.distributions
    assert _tag(site, "fast") == tag
    (module,) = (site / "fast").glob("_c.*")
    assert module.read_text() == tag.removeprefix(f"{CP}-")


@pytest.mark.parametrize("platform", ["darwin/arm64", "darwin/amd64"])
def test_universal2_wheels_are_accepted_on_both_macs(
    tmp_path: Path, os_links: Path, installer: str, platform: str
) -> None:
    site = tmp_path / "site"
    resolve(
        _app(tmp_path, "uni"),
        platform,
        "3.11",
        site,
        env=offline_env(tmp_path, os_links),
        log=tmp_path / "log.txt",
    )
    assert _tag(site, "uni") == f"{CP}-macosx_10_9_universal2"


def test_a_platform_without_a_wheel_names_the_package_and_the_platform(
    tmp_path: Path, os_links: Path, installer: str
) -> None:
    from shipyard.errors import BuildError

    with pytest.raises(BuildError, match=r"no wheel of fast for windows/arm64 \(CPython 3\.11\)"):
        resolve(
            _app(tmp_path, "fast"),
            "windows/arm64",
            "3.11",
            tmp_path / "site",
            env=offline_env(tmp_path, os_links),
            log=tmp_path / "log.txt",
        )


@pytest.mark.parametrize("platform", OS_PLATFORMS)
def test_pure_wheels_resolve_pure_for_macos_and_windows(
    tmp_path: Path, os_links: Path, platform: str
) -> None:
    found = resolve(
        _app(tmp_path, "helper"),
        platform,
        "3.11",
        tmp_path / "site",
        env=offline_env(tmp_path, os_links),
        log=tmp_path / "log.txt",
    )
    assert found.pure
    assert found.distributions == (
        Distribution("app", "1.0", True),
        Distribution("helper", "2.0", True),
    )


def test_the_installer_is_asked_for_macos_11_and_the_windows_tags() -> None:
    assert resolving._pip_platforms("darwin/arm64") == ["macosx_11_0_arm64"]
    assert resolving._pip_platforms("darwin/amd64") == ["macosx_11_0_x86_64"]
    assert resolving._pip_platforms("windows/amd64") == ["win_amd64"]
    assert resolving._pip_platforms("windows/arm64") == ["win_arm64"]
    assert resolving.target_env("darwin/arm64") == {"MACOSX_DEPLOYMENT_TARGET": "11.0"}
    assert resolving.target_env("windows/arm64") == {}
    assert set(resolving.PLATFORM_ARCH) == set(PLATFORMS)


# --- the bootstrap's OS logic, the OS faked at its seam --------------------------------


@pytest.mark.parametrize(
    ("system", "expected"),
    [
        ("linux", os.path.join("/x", "shipyard", "zipapps")),  # XDG_CACHE_HOME
        ("darwin", os.path.join("/home/u", "Library", "Caches", "shipyard", "zipapps")),
        ("windows", os.path.join("C:/Users/u/AppData/Local", "shipyard", "zipapps")),
    ],
)
def test_the_cache_folder_is_this_os_users_cache_folder(
    monkeypatch: pytest.MonkeyPatch, system: str, expected: str
) -> None:
    monkeypatch.setattr(boot, "_os", lambda: system)
    monkeypatch.setenv("HOME", "/home/u")
    environ = {"XDG_CACHE_HOME": "/x", "LOCALAPPDATA": "C:/Users/u/AppData/Local"}
    assert boot.cache_root(environ) == expected
    # $SHIPYARD_ZIPAPP_ROOT wins everywhere.
    assert boot.cache_root({**environ, boot.ROOT_ENV: "/srv/z"}) == "/srv/z"


def test_the_cache_folder_defaults_without_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/u")
    monkeypatch.setattr(boot, "_os", lambda: "windows")
    assert boot.cache_root({}) == os.path.join("/home/u", "AppData", "Local", "shipyard", "zipapps")
    monkeypatch.setattr(boot, "_os", lambda: "darwin")  # macOS has no XDG folders
    assert boot.cache_root({"XDG_CACHE_HOME": "/x"}).startswith("/home/u/Library/Caches/")


def test_the_seam_maps_sys_platform_to_manifest_names(monkeypatch: pytest.MonkeyPatch) -> None:
    for platform, name in (("win32", "windows"), ("darwin", "darwin"), ("linux", "linux")):
        monkeypatch.setattr(sys, "platform", platform)
        assert boot._os() == name == boot.system()


def test_ownership_and_modes_are_checked_only_where_posix_has_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    (root / "id").mkdir(parents=True)
    (root / "id").chmod(0o777)
    site = str(root / "id" / "site")
    monkeypatch.setattr(boot, "_os", lambda: "darwin")
    assert (
        boot.untrusted(str(root), site)
        == f"{root / 'id'} is writable by group and others (mode 777)"
    )
    monkeypatch.setattr(boot, "_os", lambda: "windows")
    assert boot._uid() is None
    assert boot.untrusted(str(root), site) is None  # no POSIX modes: nothing to judge


@pytest.mark.parametrize(
    ("system", "machine", "platform"),
    [
        ("darwin", "arm64", "darwin/arm64"),
        ("darwin", "x86_64", "darwin/amd64"),
        ("windows", "amd64", "windows/amd64"),
        ("windows", "arm64", "windows/arm64"),
    ],
)
def test_check_target_knows_macos_and_windows_machines(
    system: str, machine: str, platform: str
) -> None:
    info = {"binary": "app", "version": "1", "python": "3.11"}
    boot.check_target(
        {**info, "platform": platform, "platforms": [platform]}, (3, 11), system, machine
    )
    universal = {**info, "platform": "any", "platforms": list(SIX)}
    boot.check_target(universal, (3, 11), system, machine)
    other = "amd64" if platform.endswith("arm64") else "arm64"
    wrong = f"{system}/{other}"
    with pytest.raises(boot.BootError) as caught:
        boot.check_target(
            {**info, "platform": wrong, "platforms": [wrong]}, (3, 11), system, machine
        )
    here = platform.partition("/")[2]
    assert str(caught.value) == (
        f"built for {wrong}, but this machine is {system}/{here}; use app-1-{system}_{here}.pyz"
    )
    linux = {**info, "platform": "any", "platforms": ["linux/amd64", "linux/arm64"]}
    with pytest.raises(boot.BootError, match=f"this machine is {system}/{here};"):
        boot.check_target(linux, (3, 11), system, machine)


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("3.11.7 (tags/v3.11.7:fa7a6f2, Dec  4 2023) [MSC v.1937 64 bit (AMD64)]", "amd64"),
        ("3.12.1 (tags/v3.12.1:2305ca5, Dec  7 2023) [MSC v.1937 64 bit (ARM64)]", "arm64"),
        ("3.11.7 (tags/v3.11.7:fa7a6f2, Dec  4 2023) [MSC v.1937 32 bit (Intel)]", "x86"),
    ],
)
def test_the_machine_on_windows_is_the_interpreters(
    monkeypatch: pytest.MonkeyPatch, version: str, expected: str
) -> None:
    monkeypatch.setattr(boot, "_os", lambda: "windows")
    monkeypatch.setattr(sys, "version", version)
    assert boot.machine() == expected


# A child that runs an archive as another OS: sys.platform (what `_os` reads) faked
# after the modules the bootstrap uses are imported for real. For windows, msvcrt's
# byte locks are stood in for by flock (msvcrt exists only on Windows).
_AS = """
import atexit, fcntl, runpy, shutil, sys, tempfile, threading, types, zipfile
system, pyz = sys.argv[1], sys.argv[2]
if system == "windows":
    msvcrt = types.ModuleType("msvcrt")
    msvcrt.LK_LOCK, msvcrt.LK_NBLCK = 1, 2
    def locking(fd, mode, nbytes):
        fcntl.flock(fd, fcntl.LOCK_EX | (fcntl.LOCK_NB if mode == msvcrt.LK_NBLCK else 0))
    msvcrt.locking = locking
    sys.modules["msvcrt"] = msvcrt
sys.platform = {"windows": "win32"}.get(system, system)
sys.argv = [pyz, *sys.argv[3:]]
runpy.run_path(pyz, run_name="__main__")
"""

_PROGRAM = """\
import sys
def main():
    print("file", __file__)
    return 3
"""


def _run_as(system: str, pyz: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _AS, system, str(pyz)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def _pyz(tmp_path: Path, platform: str = "any") -> Path:
    """An archive of a small program, universal for the six platforms or for `platform`."""
    site = tmp_path / "site"
    (site / "app").mkdir(parents=True)
    (site / "app" / "__init__.py").write_text(_PROGRAM)
    info = {
        "binary": "app",
        "version": "1.0",
        "python": HERE,
        "platform": platform,
        "platforms": list(SIX) if platform == "any" else [platform],
        "entrypoint": "app:main",
    }
    target = tmp_path / "app.pyz"
    write_archive(target, DEFAULT_SHEBANG, layout(site, info), 0, compress=True)
    return target


def _clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (boot.ROOT_ENV, "XDG_CACHE_HOME")}
    env.update(HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    return env


def test_a_zipapp_runs_as_macos_from_library_caches(tmp_path: Path) -> None:
    pyz = _pyz(tmp_path)
    env = _clean_env(tmp_path)
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")  # Linux only: not read on macOS
    for _ in range(2):  # unpacks, then reuses
        done = _run_as("darwin", pyz, env)
        assert done.returncode == 3, done.stderr
        assert done.stderr == ""
    root = tmp_path / "home" / "Library" / "Caches" / "shipyard" / "zipapps"
    home = root / build_id(pyz)
    assert done.stdout == f"file {home / 'site' / 'app' / '__init__.py'}\n"
    assert (home / boot.USE).read_text() == "app"
    # POSIX rules hold on macOS: the folders the bootstrap made are private.
    assert all(f.stat().st_mode & 0o777 == 0o700 for f in (root, home, home / "site"))
    assert not (tmp_path / "xdg").exists()


def test_a_zipapp_runs_as_windows_from_local_app_data(tmp_path: Path) -> None:
    pyz = _pyz(tmp_path)
    env = _clean_env(tmp_path)
    local = tmp_path / "AppData" / "Local"
    env["LOCALAPPDATA"] = str(local)
    root = local / "shipyard" / "zipapps"
    root.mkdir(parents=True)
    root.chmod(0o777)  # no POSIX modes on Windows: not judged, not refused
    for _ in range(2):
        done = _run_as("windows", pyz, env)
        assert done.returncode == 3, done.stderr
        assert done.stderr == ""
    home = root / build_id(pyz)
    assert done.stdout == f"file {home / 'site' / 'app' / '__init__.py'}\n"
    # The unpack's lock file (beside its temporary folder) is gone with the folder.
    assert sorted(p.name for p in home.iterdir()) == sorted([boot.USE, "site"])


def test_a_stale_windows_temporary_folder_is_swept_with_its_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl
    import types

    msvcrt = types.ModuleType("msvcrt")
    msvcrt.LK_LOCK, msvcrt.LK_NBLCK = 1, 2  # type: ignore[attr-defined]

    def locking(fd: int, mode: int, nbytes: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | (fcntl.LOCK_NB if mode == 2 else 0))

    msvcrt.locking = locking  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "msvcrt", msvcrt)
    monkeypatch.setattr(boot, "_os", lambda: "windows")
    live, fd = boot._locked_temp(str(tmp_path), boot.UNPACK_PREFIX)
    assert os.path.isfile(live + boot.LOCK_SUFFIX)
    stale = tmp_path / f"{boot.UNPACK_PREFIX}stale"
    (stale / "pkg").mkdir(parents=True)
    boot._sweep(str(tmp_path), boot.UNPACK_PREFIX)
    assert not stale.exists()
    assert not Path(str(stale) + boot.LOCK_SUFFIX).exists()
    assert os.path.isdir(live)  # held: left alone, and so is its lock file
    assert os.path.isfile(live + boot.LOCK_SUFFIX)
    boot._release(live, fd)
    assert not os.path.exists(live + boot.LOCK_SUFFIX)
    boot._sweep(str(tmp_path), boot.UNPACK_PREFIX)
    assert sorted(os.listdir(tmp_path)) == []


def test_the_wrong_windows_machine_is_refused_naming_the_archive(tmp_path: Path) -> None:
    pyz = _pyz(tmp_path, "windows/arm64")
    env = _clean_env(tmp_path)
    env["LOCALAPPDATA"] = str(tmp_path / "local")
    done = _run_as("windows", pyz, env)  # this interpreter's sys.version names no ARM64
    assert done.returncode == 2
    assert done.stderr == (
        "app: built for windows/arm64, but this machine is windows/x86; "
        "use app-1.0-windows_x86.pyz\n"
    )


# --- the Windows launcher --------------------------------------------------------------


def test_the_windows_launcher_runs_the_archive_beside_it_on_its_python() -> None:
    assert launcher_name("meshctl") == "meshctl.cmd"
    assert launcher("meshctl-1.4.0-windows_amd64.pyz", "3.11") == (
        b'@py -3.11 "%~dp0meshctl-1.4.0-windows_amd64.pyz" %*\r\n'
    )
    for bad in ('x" & del *.pyz', "a%PATH%.pyz", "app.exe", "-x.pyz"):
        with pytest.raises(ShipyardError):
            launcher(bad, "3.11")
    with pytest.raises(ShipyardError):
        launcher("app.pyz", "3.11 & calc")
