"""Resolution for a target platform, offline: local wheels through the real installers."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from shipyard.builders.distributions import Distribution
from shipyard.builders.resolve import resolve
from shipyard.errors import BuildError

X86 = "cp311-cp311-manylinux_2_17_x86_64"
ARM = "cp311-cp311-manylinux_2_17_aarch64"


def make_wheel(
    folder: Path,
    name: str,
    version: str,
    tag: str = "py3-none-any",
    files: Mapping[str, str | bytes] | None = None,
    requires: Sequence[str] = (),
    extras: Mapping[str, Sequence[str]] | None = None,
) -> Path:
    """A valid wheel of `files` with METADATA (requirements and extras), WHEEL and a
    hashed RECORD; the same bytes for the same arguments."""
    folder.mkdir(parents=True, exist_ok=True)
    dist_info = f"{name}-{version}.dist-info"
    contents = {k: v.encode() if isinstance(v, str) else v for k, v in (files or {}).items()}
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    for extra, needs in (extras or {}).items():
        meta += f"Provides-Extra: {extra}\n"
        meta += "".join(f"Requires-Dist: {r}; extra == '{extra}'\n" for r in needs)
    contents[f"{dist_info}/METADATA"] = meta.encode()
    purelib = "true" if tag.endswith("-none-any") else "false"
    contents[f"{dist_info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: {purelib}\nTag: {tag}\n"
    ).encode()
    record = []
    for path, data in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    contents[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = folder / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in contents.items():
            archive.writestr(zipfile.ZipInfo(path, (2020, 1, 1, 0, 0, 0)), data)
    return wheel


def offline_env(tmp: Path, links: Path) -> dict[str, str]:
    """Installers that see only the wheels in `links` and touch no network."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp),
        "UV_OFFLINE": "1",
        "UV_NO_INDEX": "1",
        "UV_FIND_LINKS": str(links),
        "UV_CACHE_DIR": str(tmp / "uv-cache"),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(links),
    }


@pytest.fixture
def links(tmp_path: Path) -> Path:
    """A find-links folder: a pure `helper`, and `fast` with native wheels for x86_64 only."""
    folder = tmp_path / "links"
    make_wheel(folder, "helper", "2.0", files={"helper/__init__.py": "X = 1\n"})
    make_wheel(
        folder,
        "fast",
        "1.5",
        X86,
        {"fast/__init__.py": "", "fast/_c.cpython-311-x86_64-linux-gnu.so": b"\x7fELF"},
    )
    return folder


def _app(tmp_path: Path, *requires: str) -> Path:
    files = {"app/__init__.py": "def main():\n    return 0\n"}
    return make_wheel(tmp_path / "wheels", "app", "1.0", files=files, requires=requires)


@pytest.mark.parametrize("platform", ["linux/amd64", "linux/arm64", "linux/arm/v7"])
def test_pure_wheels_resolve_pure_for_any_platform(
    tmp_path: Path, links: Path, platform: str
) -> None:
    site = tmp_path / "site"
    found = resolve(
        _app(tmp_path, "helper>=2"),
        platform,
        "3.11",
        site,
        env=offline_env(tmp_path, links),
        log=tmp_path / "log.txt",
    )
    assert found.pure and found.platform == platform and found.site == site
    assert found.distributions == (
        Distribution("app", "1.0", True),
        Distribution("helper", "2.0", True),
    )
    assert (site / "helper" / "__init__.py").read_text() == "X = 1\n"
    # Nothing that names this machine or this moment is left behind.
    names = {p.name for p in site.rglob("*")}
    assert not names & {"direct_url.json", "uv_cache.json", "bin", ".lock", "__pycache__"}
    assert "direct_url" not in (site / "app-1.0.dist-info" / "RECORD").read_text()


def test_a_native_dependency_makes_the_resolution_platform_specific(
    tmp_path: Path, links: Path
) -> None:
    found = resolve(
        _app(tmp_path, "fast"),
        "linux/amd64",
        "3.11",
        tmp_path / "site",
        env=offline_env(tmp_path, links),
        log=tmp_path / "log.txt",
    )
    assert not found.pure
    assert Distribution("fast", "1.5", False) in found.distributions
    assert (tmp_path / "site" / "fast" / "_c.cpython-311-x86_64-linux-gnu.so").is_file()


@pytest.mark.parametrize("platform", ["linux/arm64", "linux/ppc64le"])
def test_a_missing_platform_wheel_names_the_package_and_the_platform(
    tmp_path: Path, links: Path, platform: str
) -> None:
    with pytest.raises(BuildError) as caught:
        resolve(
            _app(tmp_path, "fast"),
            platform,
            "3.11",
            tmp_path / "site",
            env=offline_env(tmp_path, links),
            log=tmp_path / "log.txt",
        )
    assert f"no wheel of fast for {platform} (CPython 3.11)" in str(caught.value)
    assert caught.value.log == tmp_path / "log.txt"


def test_the_arm64_wheel_is_installed_for_arm64(tmp_path: Path, links: Path) -> None:
    so = "fast/_c.cpython-311-aarch64-linux-gnu.so"
    make_wheel(links, "fast", "1.5", ARM, {"fast/__init__.py": "", so: b"\x7fELF"})
    found = resolve(
        _app(tmp_path, "fast"),
        "linux/arm64",
        "3.11",
        tmp_path / "site",
        env=offline_env(tmp_path, links),
        log=tmp_path / "log.txt",
    )
    assert not found.pure
    assert [p.name for p in (tmp_path / "site" / "fast").glob("*.so")] == [so.split("/")[1]]


def test_each_distribution_is_named_with_the_hash_of_the_wheel_installed(
    tmp_path: Path, links: Path
) -> None:
    # uv keeps no wheel file: the hashes come from a lock of the same pins, made from
    # what the install left in uv's cache; a cache of its own, so nothing is there before.
    app = _app(tmp_path, "helper", "fast")
    found = resolve(
        app,
        "linux/amd64",
        "3.11",
        tmp_path / "site",
        env=offline_env(tmp_path, links),
        log=tmp_path / "log.txt",
    )
    files = {"app": app, "helper": links / "helper-2.0-py3-none-any.whl"}
    files["fast"] = links / f"fast-1.5-{X86}.whl"
    assert {d.name: d.sha256 for d in found.distributions} == {
        name: hashlib.sha256(path.read_bytes()).hexdigest() for name, path in files.items()
    }
    assert "no wheel hash known" not in (tmp_path / "log.txt").read_text()


def _lock(tmp_path: Path, links: Path, digest: str | None = None) -> Path:
    wheel = links / "helper-2.0-py3-none-any.whl"
    real = hashlib.sha256(wheel.read_bytes()).hexdigest()
    lock = tmp_path / "requirements.txt"
    lock.write_text(f"helper==2.0 --hash=sha256:{digest or real}\n")
    return lock


def test_a_lock_file_installs_what_it_pins(tmp_path: Path, links: Path) -> None:
    found = resolve(
        _app(tmp_path, "helper"),
        "linux/amd64",
        "3.11",
        tmp_path / "site",
        env=offline_env(tmp_path, links),
        log=tmp_path / "log.txt",
        requirements=_lock(tmp_path, links),
    )
    assert [d.name for d in found.distributions] == ["app", "helper"]


def test_a_hash_mismatch_fails_the_resolution(tmp_path: Path, links: Path) -> None:
    with pytest.raises(BuildError, match=r"(?i)hash"):
        resolve(
            _app(tmp_path, "helper"),
            "linux/amd64",
            "3.11",
            tmp_path / "site",
            env=offline_env(tmp_path, links),
            log=tmp_path / "log.txt",
            requirements=_lock(tmp_path, links, "0" * 64),
        )


def test_a_dependency_missing_from_the_lock_file_fails(tmp_path: Path, links: Path) -> None:
    with pytest.raises(BuildError, match=r"(?i)hash"):
        resolve(
            _app(tmp_path, "helper", "fast"),
            "linux/amd64",
            "3.11",
            tmp_path / "site",
            env=offline_env(tmp_path, links),
            log=tmp_path / "log.txt",
            requirements=_lock(tmp_path, links),
        )


def test_an_unknown_platform_is_a_build_error(tmp_path: Path, links: Path) -> None:
    with pytest.raises(BuildError, match="unknown platform freebsd/amd64"):
        resolve(
            _app(tmp_path),
            "freebsd/amd64",
            "3.11",
            tmp_path / "site",
            env=offline_env(tmp_path, links),
            log=tmp_path / "log.txt",
        )


def _app_with_extra(tmp_path: Path) -> Path:
    files = {"app/__init__.py": "def main():\n    return 0\n"}
    return make_wheel(tmp_path / "wheels", "app", "1.0", files=files, extras={"speed": ["fast>=1"]})


def test_extras_install_their_dependencies_and_only_when_asked(tmp_path: Path, links: Path) -> None:
    wheel = _app_with_extra(tmp_path)
    env = offline_env(tmp_path, links)
    plain = resolve(wheel, "linux/amd64", "3.11", tmp_path / "a", env=env, log=tmp_path / "l")
    assert [d.name for d in plain.distributions] == ["app"]
    assert plain.pure
    extra = resolve(
        wheel, "linux/amd64", "3.11", tmp_path / "b", env=env, log=tmp_path / "l", extras=["speed"]
    )
    assert [d.name for d in extra.distributions] == ["app", "fast"]
    assert not extra.pure  # the extra's native dependency makes it per platform


def test_extras_with_a_lock_file_need_their_dependencies_in_it(tmp_path: Path, links: Path) -> None:
    wheel = _app_with_extra(tmp_path)
    fast = next(links.glob("fast-*.whl"))
    lock = tmp_path / "lock.txt"
    digest = hashlib.sha256(fast.read_bytes()).hexdigest()
    lock.write_text(f"fast==1.5 --hash=sha256:{digest}\n")
    env = offline_env(tmp_path, links)
    found = resolve(
        wheel,
        "linux/amd64",
        "3.11",
        tmp_path / "site",
        env=env,
        log=tmp_path / "log.txt",
        requirements=lock,
        extras=["speed"],
    )
    assert [d.name for d in found.distributions] == ["app", "fast"]
    lock.write_text("")  # the extra's dependency is not pinned: hash mode refuses it
    with pytest.raises(BuildError, match=r"(?i)hash"):
        resolve(
            wheel,
            "linux/amd64",
            "3.11",
            tmp_path / "site2",
            env=env,
            log=tmp_path / "log.txt",
            requirements=lock,
            extras=["speed"],
        )
