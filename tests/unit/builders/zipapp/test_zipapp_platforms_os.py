"""Issue 15, item 1: zipapps for macOS and Windows (darwin/windows, amd64/arm64).

The manifest takes the four platforms for zipapps and refuses them for images; the
resolver asks the installers for their wheel tags (offline, real uv and pip, local
wheels). The bootstrap's OS logic is in boot/test_host_platforms.py and beside each
module's tests (boot/test_host.py, test_trust.py, test_folders.py), the launcher in
test_launcher.py.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from shipyard.builders import installer as installing
from shipyard.builders.distributions import Distribution
from shipyard.builders.resolve import resolve
from shipyard.errors import ManifestError
from shipyard.manifest import IMAGE_PLATFORMS, PLATFORMS, json_schema, load_manifest
from shipyard.manifest._cached import manifest_from_json, manifest_to_json
from shipyard.process import uv_binary
from tests.unit.builders.test_resolve import make_wheel, offline_env

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
        monkeypatch.setattr(installing, "uv_binary", lambda: None)
    elif uv_binary() is None:
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
