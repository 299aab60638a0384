"""A uv workspace in python/ beside docs/ and dotnet/, built from that folder with only a
binaries.yaml added (issue 31): stale upper bounds between members, root overrides and
constraints, an sdist-only pure dependency, a native wheel that needs libstdc++, static
member versions and a prefixed tag (python-v0.5.3).

What ships must equal `uv sync --frozen --package acme-cli --no-dev --no-editable`,
distribution for distribution; zipapps and images (amd64, arm64 under QEMU) must run;
`release --snapshot` must stage every binary at its own version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from shipyard.builders.zipapp import _boot as boot
from shipyard.builders.zipapp._boot.layout import BUILD_INFO
from tests.integration._images import image_says
from tests.integration.conftest import Services
from tests.unit._dynamic import Uv, backend_index, backend_wheels, git_commit, offline
from tests.unit._nested import greenlet_wheels, nested_repo
from tests.unit._workspaces import UV, uv_env

__all__ = ["backend_wheels", "greenlet_wheels"]  # session fixtures, used by name

pytestmark = pytest.mark.integration

PLATFORMS = ("linux/amd64", "linux/arm64")
_EXPECTED = (
    "ok acme-chat acme-chat==0.7.5 acme-cli==0.2.4 acme-core==0.7.5 alpha==1.0 beta==1.0 "
    "gamma==1.0 greenlet=={greenlet} htmlish==2024.2.26"
)


@pytest.fixture(scope="module")
def repo(
    tmp_path_factory: pytest.TempPathFactory,
    backend_wheels: list[Path],
    greenlet_wheels: list[Path],
    services: Services,
) -> tuple[Path, dict[str, str], Uv]:
    top = tmp_path_factory.mktemp("nested")
    index = backend_index(top / "index", backend_wheels)
    uv = Uv(index, top / "uv-cache")
    root = nested_repo(top / "repo", index, greenlet_wheels)
    uv(root, "lock")
    for name in ("alpha", "beta", "gamma"):
        index.add(name, "2.0")  # what an unlocked, unconstrained install would take
    (root / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: acme, version: git, python: '3.11', tag_prefix: python-v}\n"
        f"defaults: {{platforms: [{', '.join(PLATFORMS)}],"
        f" image: {{base: '${{ACME_BASE:-oci-layout:{services.base_layout}}}'}}}}\n"
        "binaries:\n"
        "  acme: {source: packages/cli, entrypoint: 'acme_cli:main',"
        " outputs: [wheel, zipapp, image]}\n"
        "  bench: {source: packages/bench, entrypoint: 'acme_bench:main', outputs: [wheel]}\n"
    )
    git_commit(top / "repo")
    subprocess.run(["git", "-C", str(top / "repo"), "tag", "python-v0.5.3"], check=True)
    (top / "repo" / "dotnet" / "App" / "Program.cs").write_text("// a later commit\n")
    git_commit(top / "repo", "dotnet")
    subprocess.run(["git", "-C", str(top / "repo"), "tag", "dotnet-v9.0.0"], check=True)
    env = {
        **offline(index, top / "uv-cache"),
        "SHIPYARD_CACHE_DIR": str(top / "shipyard-cache"),
        "NO_COLOR": "1",
        "CI": "1",
    }
    del env["UV_NO_CONFIG"]  # as users run it: uv reads the root's [tool.uv] overrides
    return root, env, uv


def _shipyard(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shipyard", *args],
        cwd=root, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip


def _synced(root: Path, uv: Uv, venv: Path) -> dict[str, str]:
    """What `uv sync --frozen --package acme-cli --no-dev --no-editable` installs."""
    assert UV is not None
    env = {**uv_env(uv.index, uv.cache), "UV_PROJECT_ENVIRONMENT": str(venv)}
    done = subprocess.run(
        [UV, "sync", "--frozen", "--package", "acme-cli", "--no-dev", "--no-editable"],
        cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    listing = subprocess.run(
        [str(venv / "bin/python"), "-c",
         "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name'].lower():"
         " d.version for d in m.distributions()}))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return dict(json.loads(listing.stdout))


@pytest.mark.requires("base-layout", "docker", "qemu-aarch64")
def test_the_workspace_folder_builds_exactly_the_lock(
    repo: tuple[Path, dict[str, str], Uv], tmp_path: Path
) -> None:
    root, env, uv = repo
    checked = _shipyard(root, env, "check")
    assert checked.returncode == 0, checked.stderr
    assert "uv.lock up to date" in checked.stdout
    built = _shipyard(root, env, "build", "--binary", "acme")
    assert built.returncode == 0, built.stderr
    assert (root / "dist/report.json").is_file()
    assert not (root.parent / "dist").exists(), "dist/ belongs beside binaries.yaml"
    synced = _synced(root, uv, tmp_path / "venv")
    assert synced["acme-chat"] == "0.7.5" and synced["htmlish"] == "2024.2.26"
    expected = _EXPECTED.format(greenlet=synced["greenlet"])
    for platform in PLATFORMS:
        flat = platform.replace("/", "_")
        pyz = root / f"dist/zipapps/acme-0.2.4-{flat}.pyz"  # the project's own version
        with zipfile.ZipFile(pyz) as archive:
            shipped = json.loads(archive.read(BUILD_INFO))["distributions"]
        assert shipped == synced, platform
    native = root / "dist/zipapps/acme-0.2.4-linux_amd64.pyz"
    ran = subprocess.run(
        [sys.executable, str(native)],
        env={**os.environ, boot.ROOT_ENV: str(tmp_path / "unpacked")},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == expected
    for platform in PLATFORMS:
        assert image_says(root, "acme", platform) == expected


@pytest.mark.requires("base-layout")
def test_a_snapshot_stages_each_binary_at_its_own_version(
    repo: tuple[Path, dict[str, str], Uv],
) -> None:
    root, env, _ = repo
    done = _shipyard(root, env, "release", "--snapshot", "--clean")
    assert done.returncode == 0, done.stderr
    # The tag python-v0.5.3 names the release (dotnet's nearer tag does not); the
    # commit after it changed only dotnet/, so the workspace's version stays a dev one.
    (folder,) = (root / "dist/release").iterdir()
    assert folder.name.startswith("0.5.4.dev1"), folder.name
    staged = json.loads((folder / "release.json").read_text())
    paths = sorted(a["path"] for a in staged["artifacts"] if a["kind"] in ("wheel", "zipapp"))
    assert paths == [
        "wheels/acme_bench-0.0.1a1-py3-none-any.whl",
        "wheels/acme_chat-0.7.5-py3-none-any.whl",
        "wheels/acme_cli-0.2.4-py3-none-any.whl",
        "wheels/acme_core-0.7.5-py3-none-any.whl",
        "zipapps/acme-0.2.4-linux_amd64.pyz",
        "zipapps/acme-0.2.4-linux_arm64.pyz",
    ]
    archives = sorted(a["path"] for a in staged["artifacts"] if a["kind"] == "archive")
    assert archives == [
        "archives/acme-0.2.4-linux-amd64.tar.gz", "archives/acme-0.2.4-linux-arm64.tar.gz",
    ]  # fmt: skip
    bench = json.loads((folder / "sbom/bench.cdx.json").read_text())
    assert bench["metadata"]["component"]["version"] == "0.0.1a1"
    assert sorted((c["name"], c["version"]) for c in bench["components"]) == [
        ("acme-core", "0.7.5"), ("alpha", "1.0"), ("beta", "1.0"), ("gamma", "1.0"),
    ]  # fmt: skip


@pytest.mark.requires("base-layout")
def test_a_base_without_libstdcxx_is_refused_naming_the_library_and_distribution(
    repo: tuple[Path, dict[str, str], Uv], services: Services
) -> None:
    root, env, _ = repo
    distroless = Path(f"{services.base_layout}-distroless")  # python3-minimal, no libstdc++
    if not (distroless / "index.json").is_file():
        pytest.skip(f"no distroless base at {distroless} (bash scripts/services.sh)")
    images = root / "dist/images"
    before = {p: p.read_bytes() for p in images.rglob("index.json")} if images.is_dir() else {}
    done = _shipyard(
        root, {**env, "ACME_BASE": f"oci-layout:{distroless}"}, "build", "--binary", "acme"
    )
    assert done.returncode == 1, done.stderr
    for platform, arch in (("linux/amd64", "x86_64"), ("linux/arm64", "aarch64")):
        assert (
            f"libstdc++.so.6, needed by /opt/shipyard/deps/site/greenlet/_greenlet.cpython-311-"
            f"{arch}-linux-gnu.so (greenlet " in done.stderr
        ), done.stderr
        assert f"-distroless ({platform}) nor in the image" in done.stderr
    assert "image.allow_missing_libraries: [libstdc++.so.6]" in done.stderr
    assert "Traceback" not in done.stderr
    # Nothing already built is lost: the images of the earlier build are still there.
    assert {p: p.read_bytes() for p in images.rglob("index.json")} == before
    # Accepting it builds (the zipapp and wheel were never at stake).
    (root / "binaries.yaml").write_text(
        (root / "binaries.yaml")
        .read_text()
        .replace(
            "outputs: [wheel, zipapp, image]}",
            "outputs: [wheel, zipapp, image], image: {allow_missing_libraries: [libstdc++.so.6]}}",
        )
    )
    try:
        accepted = _shipyard(
            root, {**env, "ACME_BASE": f"oci-layout:{distroless}"}, "build", "--binary", "acme"
        )
        assert accepted.returncode == 0, accepted.stderr
    finally:
        subprocess.run(["git", "-C", str(root), "checkout", "--", "binaries.yaml"], check=True)


@pytest.mark.requires("base-layout")
def test_affected_reads_git_for_the_whole_repository_and_names_the_workspaces_binaries(
    repo: tuple[Path, dict[str, str], Uv],
) -> None:
    root, env, _ = repo
    top = root.parent
    head = subprocess.run(
        ["git", "-C", str(top), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    (top / "docs" / "index.md").write_text("# Acme, edited\n")
    git_commit(top, "docs only")
    core = root / "packages/core/src/acme_core/__init__.py"
    try:
        done = _shipyard(root, env, "affected", "--since=HEAD~1", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["binaries"] == [], "a docs/ edit affects no binary"
        core.write_text(core.read_text() + "EDITED = True\n")
        git_commit(top, "edit acme-core")
        done = _shipyard(root, env, "affected", "--since=HEAD~1", "--json")
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)
        assert sorted(found["binaries"]) == ["acme", "bench"]
        paths = {r["path"] for a in found["affected"] for r in a["reasons"]}
        assert paths == {"packages/core/src/acme_core/__init__.py"}, paths
    finally:
        subprocess.run(["git", "-C", str(top), "reset", "-q", "--hard", head], check=True,
                       env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull})  # fmt: skip
