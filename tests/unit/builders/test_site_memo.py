"""One resolution per (lock state, platform): a binary's zipapp and image share their
resolved sites (issue 28 item 4), through the real builders and the real installer."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from shipyard.builders.distributions import Distribution
from shipyard.builders.image import ImageBuilder
from shipyard.builders.resolve import SITES, Resolution
from shipyard.builders.site_memo import SiteMemo, copy_site, site_key
from shipyard.builders.zipapp import ZipappBuilder, ZipappOptions
from shipyard.engine.plan import Action
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import Artifact, BuildContext
from shipyard.manifest import Image as ImageSettings
from shipyard.oci.layer import BlobStore, Entry, write_layer
from shipyard.oci.layout import write_layout
from shipyard.oci.model import Config, Image, Platform, append_layer, make_index
from shipyard.stamp import Stamp
from tests.unit.builders.test_resolve import make_wheel, offline_env

EPOCH = 1_700_000_000
PLATFORMS = ("linux/amd64", "linux/arm64")


def _repo(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    store = BlobStore(root / "base-store")
    images = []
    for platform in PLATFORMS:
        layer = write_layer([Entry("etc/os-release", data=b"ID=debian\n")], store, EPOCH)
        images.append(append_layer(Image(Platform.parse(platform), config=Config()), layer))
    write_layout(root / "base", make_index(images), ref="1")
    return root


def _options(action: Action) -> ZipappOptions:
    return ZipappOptions(entrypoint="app:main")


def _build(root: Path, links: Path, wheel: Path, kinds: tuple[str, ...]) -> dict[str, bytes]:
    """Build the `kinds` ("zipapp", "image") of the binary `app` in `root`: each
    output's bytes by file name."""
    env = {**offline_env(root, links), "SHIPYARD_CACHE_DIR": str(root / "cache")}
    ctx = BuildContext(root, root / "dist", Stamp("1.0", "abc", False, EPOCH), "3.11", env)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    deps = (Artifact("wheel", "", "py3-none-any", wheel, digest, wheel.stat().st_size),)
    outputs: dict[str, bytes] = {}
    for kind in kinds:
        if kind == "zipapp":
            action = Action("zipapp:app", "zipapp", ("app",), root / "src", PLATFORMS)
            built = wrapped(ZipappBuilder(_options)).run(action, ctx, deps).outputs
        else:
            settings = ImageSettings(base="oci-layout:base")
            action = Action(
                "image:app", "image", ("app",), root / "src", PLATFORMS,
                entrypoint="app:main", image=settings,
            )  # fmt: skip
            built = wrapped(ImageBuilder()).run(action, ctx, deps).outputs
        for artifact in built:
            if artifact.path.is_file():
                outputs[artifact.path.name] = artifact.path.read_bytes()
    return outputs


def _installs(root: Path) -> int:
    """How many times an installer ran in the builds of `root`, as their logs say (each
    run's command once: an action's log may gather its platforms' logs)."""
    logs = (root / "dist" / "logs").rglob("*.log")
    lines = {ln for log in logs for ln in log.read_text().splitlines()}
    return sum(ln.startswith("$ ") and " pip install " in ln for ln in lines)


@pytest.fixture
def wheels(tmp_path: Path) -> tuple[Path, Path]:
    """The binary's wheel (needs helper) and a find-links folder with helper."""
    links = tmp_path / "links"
    make_wheel(links, "helper", "2.0", files={"helper/__init__.py": "X = 1\n"})
    files = {"app/__init__.py": "import helper\n\n\ndef main():\n    return 0\n"}
    app = make_wheel(tmp_path / "wheels", "app", "1.0", files=files, requires=["helper"])
    return app, links


def test_a_binarys_zipapp_and_image_resolve_each_platform_once(
    tmp_path: Path, wheels: tuple[Path, Path]
) -> None:
    app, links = wheels
    before = SITES.resolved
    root = _repo(tmp_path / "one")
    both = _build(root, links, app, ("zipapp", "image"))
    assert _installs(root) == len(PLATFORMS)  # not 2 x len(PLATFORMS)
    assert SITES.resolved - before == len(PLATFORMS)
    image_log = next((root / "dist" / "logs").rglob("image*.log")).read_text()
    assert image_log.count("not resolved again") == len(PLATFORMS)
    # The image made from the shared sites is the one a build of the image alone makes.
    SITES.forget()
    alone = _build(_repo(tmp_path / "two"), links, app, ("image",))
    assert _installs(tmp_path / "two") == len(PLATFORMS)
    assert alone and all(both[name] == data for name, data in alone.items())


def test_another_lock_state_or_platform_is_another_site(tmp_path: Path) -> None:
    app = make_wheel(tmp_path / "w", "app", "1.0")
    lib_a = make_wheel(tmp_path / "w", "liba", "1.0")
    lib_b = make_wheel(tmp_path / "w", "libb", "1.0")
    key = site_key([app, lib_a, lib_b], "linux/amd64", "3.11", {"file": "aa"}, ["x"], {})
    assert site_key([app, lib_b, lib_a], "linux/amd64", "3.11", {"file": "aa"}, ["x"], {}) == key
    assert site_key([app, lib_a, lib_b], "linux/arm64", "3.11", {"file": "aa"}, ["x"], {}) != key
    assert site_key([app, lib_a, lib_b], "linux/amd64", "3.12", {"file": "aa"}, ["x"], {}) != key
    assert site_key([app, lib_a, lib_b], "linux/amd64", "3.11", {"file": "bb"}, ["x"], {}) != key
    assert site_key([app, lib_a, lib_b], "linux/amd64", "3.11", None, ["x"], {}) != key
    assert site_key([app, lib_a, lib_b], "linux/amd64", "3.11", {"file": "aa"}, [], {}) != key
    assert site_key([lib_a, app, lib_b], "linux/amd64", "3.11", {"file": "aa"}, ["x"], {}) != key
    index = {"UV_INDEX_URL": "file:///elsewhere"}
    assert site_key([app, lib_a, lib_b], "linux/amd64", "3.11", {"file": "aa"}, ["x"], index) != key
    changed = make_wheel(tmp_path / "w2", "app", "1.0", files={"app/x.py": "changed"})
    assert (
        site_key([changed, lib_a, lib_b], "linux/amd64", "3.11", {"file": "aa"}, ["x"], {}) != key
    )


def _fake(dest: Path, calls: list[Path], fail: bool = False) -> Resolution:
    calls.append(dest)
    if fail:
        raise RuntimeError("the installer failed")
    (dest / "pkg").mkdir(parents=True)
    (dest / "pkg" / "__init__.py").write_text("X = 1\n")
    return Resolution("linux/amd64", dest, (Distribution("pkg", "1.0", True),), True)


def test_a_failed_or_removed_site_is_resolved_again(tmp_path: Path) -> None:
    memo = SiteMemo(tmp_path / "kept")
    calls: list[Path] = []
    with pytest.raises(RuntimeError):
        memo.site("k", tmp_path / "a", lambda: _fake(tmp_path / "a", calls, fail=True))
    first, looked = memo.site("k", tmp_path / "b", lambda: _fake(tmp_path / "b", calls))
    assert not looked and first.site == tmp_path / "b" and len(calls) == 2
    again, looked = memo.site("k", tmp_path / "c", lambda: _fake(tmp_path / "c", calls))
    assert looked and len(calls) == 2
    assert again.site == tmp_path / "c" and again.distributions == first.distributions
    assert (tmp_path / "c" / "pkg" / "__init__.py").read_text() == "X = 1\n"
    shutil.rmtree(tmp_path / "kept")  # swept: resolved again, not a broken lookup
    memo.site("k", tmp_path / "d", lambda: _fake(tmp_path / "d", calls))
    assert len(calls) == 3


def test_a_kept_site_is_linked_with_its_symbolic_links_as_links(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "mod.py").write_text("A = 1\n")
    (site / "pkg" / "alias.py").symlink_to("mod.py")
    (site / "linked").symlink_to(tmp_path / "outside", target_is_directory=True)
    copy_site(site, tmp_path / "copy")
    assert (tmp_path / "copy" / "pkg" / "mod.py").read_text() == "A = 1\n"
    assert (tmp_path / "copy" / "pkg" / "alias.py").readlink() == Path("mod.py")
    assert (tmp_path / "copy" / "linked").is_symlink()
    assert not (tmp_path / "outside").exists()


def test_a_site_that_cannot_be_linked_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another file system (a tmpfs temporary folder): no copy is kept in its place."""
    memo = SiteMemo(tmp_path / "kept")
    calls: list[Path] = []

    def cross_device(source: object, target: object) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr("shipyard.builders.site_memo.os.link", cross_device)
    memo.site("k", tmp_path / "a", lambda: _fake(tmp_path / "a", calls))
    assert not list((tmp_path / "kept").rglob("*.py"))
    _, looked = memo.site("k", tmp_path / "b", lambda: _fake(tmp_path / "b", calls))
    assert not looked and len(calls) == 2


def test_kept_sites_live_beside_the_builds_temporary_folder_where_a_kill_is_swept(
    tmp_path: Path,
) -> None:
    """A SIGKILL skips atexit: the kept sites must sit in dist/ as `.tmp-*`, which the
    next build sweeps, never in the system's temporary folder."""
    from shipyard._fs import remove_stale_temps

    dist = tmp_path / "dist"
    dest = dist / ".tmp-zipapp-x" / "site-amd64"
    dest.parent.mkdir(parents=True)  # the builder's own temporary folder, in dist/

    def install() -> Resolution:
        dest.mkdir(parents=True)
        (dest / "pkg.py").write_text("X = 1\n")
        return Resolution("linux/amd64", dest, (Distribution("pkg", "1.0", True),), True)

    memo = SiteMemo()
    memo.site("k" * 64, dest, install)
    kept = [p for p in dist.iterdir() if p.name.startswith(".tmp-sites-")]
    assert len(kept) == 1 and (kept[0] / ("k" * 64) / "pkg.py").read_text() == "X = 1\n"
    assert remove_stale_temps(dist) >= 1 and not kept[0].exists()
