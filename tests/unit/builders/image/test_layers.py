"""Image layers by how often things change: third-party, in-repo libraries, the binary.

Real resolutions (uv, offline) of tiny wheels from a local find-links folder: an app
that imports a library of the same repository, both needing a third-party package
the folder holds at two versions.
"""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from shipyard.artifacts import Distribution, Metadata
from shipyard.builders.image import ImageBuilder
from shipyard.builders.image import layers as layers_module
from shipyard.builders.image.layers import (
    DEPS_SITE,
    LIBS_SITE,
    SHARED_EPOCH,
    entry_script,
    split_site,
)
from shipyard.builders.resolve import Locked
from shipyard.engine.plan import Action
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import Artifact, BuildContext
from shipyard.errors import BuildError
from shipyard.manifest import Image as ImageSettings
from shipyard.oci.layer import BlobStore, Entry, write_layer
from shipyard.oci.layout import read_layout
from shipyard.oci.model import Image, Layer, Platform
from shipyard.process import uv_binary
from shipyard.stamp import Stamp
from tests.unit.builders.image.test_image_builder import EPOCH, MAIN, StandIn, _base
from tests.unit.builders.test_resolve import make_wheel, offline_env

PLATFORMS = ("linux/amd64", "linux/arm64")
APP = "import acme_common\nimport thirdparty\n\ndef main():\n    print(acme_common.HELLO)\n"

pytestmark = pytest.mark.skipif(uv_binary() is None, reason="needs uv")


@dataclasses.dataclass(frozen=True)
class Repo:
    """A folder with a base layout, a find-links folder and room for wheels."""

    root: Path
    links: Path

    def ctx(self, dist: str, version: str = "1.2.3", epoch: int = EPOCH) -> BuildContext:
        env = {**offline_env(self.root, self.links), "SHIPYARD_CACHE_DIR": str(self.root / "c")}
        stamp = Stamp(version, "abc123", False, epoch)
        return BuildContext(self.root, self.root / dist, stamp, "3.11", env)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    _base(tmp_path)
    links = tmp_path / "links"
    for version in ("1.0", "2.0"):
        files = {"thirdparty/__init__.py": f"VERSION = {version!r}\n"}
        make_wheel(links, "thirdparty", version, files=files)
    return Repo(tmp_path, links)


def _artifact(wheel: Path, name: str, version: str) -> Artifact:
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    meta = Metadata(wheel=Distribution(name, version))
    return Artifact("wheel", "", "py3-none-any", wheel, digest, wheel.stat().st_size, meta)


def _app(repo: Repo, name: str = "acme-app", main: str = APP, lib: bool = True) -> Artifact:
    module = name.replace("-", "_")
    requires = ["thirdparty", *(["acme-common"] if lib else [])]
    files = {f"{module}/__init__.py": main}
    wheel = make_wheel(repo.root / "w" / name, module, "0.1", files=files, requires=requires)
    return _artifact(wheel, name, "0.1")


def _lib(repo: Repo, hello: str = "hi") -> Artifact:
    files = {"acme_common/__init__.py": f"HELLO = {hello!r}\n"}
    folder = repo.root / "w" / f"common-{hello}"
    return _artifact(
        make_wheel(folder, "acme_common", "0.1", files=files, requires=["thirdparty"]),
        "acme-common",
        "0.1",
    )


def _action(repo: Repo, binary: str = "app", project: str = "acme-app", **kw: object) -> Action:
    action = Action(
        f"image:{binary}",
        "image",
        (binary,),
        repo.root / "src",
        PLATFORMS,
        ("wheel:app", "wheel:common"),
        entrypoint=f"{project.replace('-', '_')}:main",
        image=ImageSettings(base="oci-layout:base"),
        project=project,
    )
    return dataclasses.replace(action, **kw)  # type: ignore[arg-type]


def _images(ctx: BuildContext, binary: str = "app") -> dict[str, Image]:
    found = read_layout(ctx.dist / "images" / binary, [Platform.parse(p) for p in PLATFORMS])
    return {str(platform): image for platform, (image, _) in found.items()}


def _build(repo: Repo, action: Action, ctx: BuildContext, *deps: Artifact) -> dict[str, Image]:
    wrapped(ImageBuilder()).run(action, ctx, deps)
    return _images(ctx, action.binaries[0])


def _members(layer: Layer) -> dict[str, int]:
    """Each file's path -> mtime."""
    with tarfile.open(layer.path, "r:gz") as tar:
        return {m.name: int(m.mtime) for m in tar.getmembers() if m.isfile()}


def _digests(image: Image) -> list[str]:
    return [layer.descriptor.digest for layer in image.layers]


def test_third_party_then_libraries_then_the_binary(repo: Repo) -> None:
    ctx = repo.ctx("dist")
    images = _build(repo, _action(repo), ctx, _app(repo), _lib(repo))
    amd, arm = images["linux/amd64"], images["linux/arm64"]
    assert _digests(amd)[1:] == _digests(arm)[1:], "pure sites: one set of layers"
    _, deps, libs, app = amd.layers
    assert [h.created_by for h in amd.history][-3:] == [
        "shipyard: third-party dependencies",
        "shipyard: in-repo libraries",
        "shipyard: app 1.2.3",
    ]
    deps_files, libs_files, app_files = _members(deps), _members(libs), _members(app)
    assert f"{DEPS_SITE[1:]}/thirdparty/__init__.py" in deps_files
    assert all(p.startswith(f"{DEPS_SITE[1:]}/thirdparty") for p in deps_files), deps_files
    assert all(p.startswith(f"{LIBS_SITE[1:]}/acme_common") for p in libs_files), libs_files
    assert f"{LIBS_SITE[1:]}/acme_common/__init__.py" in libs_files
    assert "opt/app/bin/app" in app_files and "opt/app/site/acme_app/__init__.py" in app_files
    assert all(p.startswith("opt/app/") for p in app_files), app_files
    assert set(deps_files.values()) == set(libs_files.values()) == {SHARED_EPOCH}
    assert set(app_files.values()) == {EPOCH}, "the binary's layer keeps its stamp's clock"
    env = dict(line.partition("=")[::2] for line in amd.config.env)
    assert env["PYTHONPATH"] == f"/opt/app/site:{LIBS_SITE}:{DEPS_SITE}"


def test_an_app_edit_changes_only_the_last_layer(repo: Repo) -> None:
    lib = _lib(repo)
    before = _build(repo, _action(repo), repo.ctx("one"), _app(repo), lib)
    edited = _app(repo, main=APP + "# an edit\n")
    after = _build(repo, _action(repo), repo.ctx("two"), edited, lib)
    for platform in PLATFORMS:
        old, new = _digests(before[platform]), _digests(after[platform])
        assert old[:-1] == new[:-1] and old[-1] != new[-1], platform


def test_a_library_edit_changes_only_the_libraries_layer(repo: Repo) -> None:
    app = _app(repo)
    before = _build(repo, _action(repo), repo.ctx("one"), app, _lib(repo, "hi"))
    after = _build(repo, _action(repo), repo.ctx("two"), app, _lib(repo, "hello"))
    for platform in PLATFORMS:
        (base, deps, libs, own), new = _digests(before[platform]), _digests(after[platform])
        assert new[:2] == [base, deps], "the third-party layer is kept"
        assert new[2] != libs
        assert new[3] == own, "the binary's own files did not change"


def test_two_binaries_with_the_same_third_party_set_share_its_blob(repo: Repo) -> None:
    lib = _lib(repo)
    one = _build(repo, _action(repo), repo.ctx("one"), _app(repo), lib)
    other = _action(repo, "other", "acme-other", id="image:other")
    two = _build(
        repo, other, repo.ctx("two", "4.5.6", EPOCH + 86400), _app(repo, "acme-other"), lib
    )
    for platform in PLATFORMS:
        (_, deps_a, libs_a, app_a), (_, deps_b, libs_b, app_b) = (
            _digests(one[platform]),
            _digests(two[platform]),
        )
        assert deps_a == deps_b, "same locked third-party set, different binary and clock"
        assert libs_a == libs_b
        assert app_a != app_b


def test_without_libraries_there_are_two_layers(repo: Repo) -> None:
    action = _action(repo, deps=("wheel:app",))
    images = _build(repo, action, repo.ctx("dist"), _app(repo, lib=False))
    image = images["linux/amd64"]
    assert len(image.layers) == 3, "base, third-party, the binary"
    assert [h.created_by for h in image.history][-2:] == [
        "shipyard: third-party dependencies",
        "shipyard: app 1.2.3",
    ]
    env = dict(line.partition("=")[::2] for line in image.config.env)
    assert env["PYTHONPATH"] == f"/opt/app/site:{DEPS_SITE}"


def test_a_binary_without_third_party_dependencies_has_no_empty_layer(repo: Repo) -> None:
    wheel = make_wheel(repo.root / "w", "solo", "0.1", files={"solo/__init__.py": APP})
    action = _action(repo, project="solo", deps=("wheel:solo",))
    images = _build(repo, action, repo.ctx("dist"), _artifact(wheel, "solo", "0.1"))
    image = images["linux/amd64"]
    assert len(image.layers) == 2, "the base and the binary: no empty third-party layer"
    assert image.history[-1].created_by == "shipyard: app 1.2.3"


def _lock(repo: Repo, version: str) -> Path:
    wheel = repo.links / f"thirdparty-{version}-py3-none-any.whl"
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    lock = repo.root / "locks" / "app.txt"
    lock.parent.mkdir(exist_ok=True)
    lock.write_text(f"thirdparty=={version} \\\n    --hash=sha256:{digest}\n")
    return lock


def test_the_requirements_lock_pins_an_old_version_over_a_newer_one(repo: Repo) -> None:
    app, lib = _app(repo), _lib(repo)
    wrapped(ImageBuilder()).run(_action(repo), repo.ctx("loose"), (app, lib))
    _lock(repo, "1.0")
    locked_action = _action(repo, requirements=Path("locks/app.txt"))
    locked = wrapped(ImageBuilder()).run(locked_action, repo.ctx("locked"), (app, lib))

    def shipped(outcome_dist: str) -> set[str]:
        images = _images(repo.ctx(outcome_dist))
        return {
            name.rsplit("/", 1)[0]
            for image in images.values()
            for name in _members(image.layers[1])
            if name.endswith(".dist-info/METADATA")
        }

    assert shipped("loose") == {f"{DEPS_SITE[1:]}/thirdparty-2.0.dist-info"}
    assert shipped("locked") == {f"{DEPS_SITE[1:]}/thirdparty-1.0.dist-info"}
    (index,) = [a for a in locked.outputs if a.kind == "image"]
    for installed in index.metadata.installed or ():
        versions = {d.name: d.version for d in installed.distributions}
        assert versions == {"acme_app": "0.1", "acme_common": "0.1", "thirdparty": "1.0"}


def test_the_lock_file_is_handed_to_the_resolver_with_the_wheels_own_first(repo: Repo) -> None:
    lock = _lock(repo, "1.0")
    resolver = StandIn(native=False)
    app, lib = _app(repo), _lib(repo)
    action = _action(repo, requirements=Path("locks/app.txt"))
    wrapped(ImageBuilder(resolver)).run(action, repo.ctx("dist"), (lib, app))
    assert resolver.requirements == [Locked(lock)] * 2, "a user's lock: resolved"
    assert resolver.wheels == [[app.path, lib.path]] * 2, "the binary's own wheel first"
    resolver = StandIn(native=False)
    wrapped(ImageBuilder(resolver)).run(_action(repo), repo.ctx("free"), (app, lib))
    assert resolver.requirements == [None, None], "no lock: resolved from the index"


def test_the_own_wheel_is_the_projects_and_one_wheel_is_needed_without_a_project(
    repo: Repo,
) -> None:
    app, lib = _app(repo), _lib(repo)
    with pytest.raises(BuildError, match="no single wheel of acme-app among its inputs"):
        wrapped(ImageBuilder(StandIn())).run(_action(repo), repo.ctx("a"), (lib,))
    with pytest.raises(BuildError, match="no wheel among its inputs"):
        wrapped(ImageBuilder(StandIn())).run(_action(repo, project=""), repo.ctx("b"), (app, lib))


def test_the_entry_script_puts_own_then_libraries_then_dependencies_first(tmp_path: Path) -> None:
    sites = [tmp_path / name for name in ("own", "libs", "deps")]
    for site, value in zip(sites, ("own", "libs", "deps"), strict=True):
        (site / "which").mkdir(parents=True)
        (site / "which" / "__init__.py").write_text(f"NAME = {value!r}\n")
    (tmp_path / "pth").mkdir()
    (tmp_path / "pth" / "extra.py").write_text("FROM_PTH = True\n")
    (sites[2] / "extra.pth").write_text(str(tmp_path / "pth") + "\n")
    (sites[0] / "app.py").write_text(
        "import sys\nimport which\nimport extra\n\n"
        "def main():\n    print(which.NAME, extra.FROM_PTH)\n    return 0\n"
    )
    script = tmp_path / "run"
    script.write_bytes(entry_script("app:main", *map(str, sites)))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "own True\n", "")
    for site in sites[:2]:
        (site / "which" / "__init__.py").unlink()
        (site / "which").rmdir()
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, check=True
        )
        assert done.stdout.split()[0] == ("libs" if site == sites[0] else "deps")


def test_a_lock_with_a_wrong_hash_fails_the_image_as_it_fails_the_zipapp(repo: Repo) -> None:
    """Issue 18 item 1: the image checks the lock's hashes too (it used to build)."""
    app, lib = _app(repo), _lib(repo)
    lock = _lock(repo, "1.0")
    lock.write_text(lock.read_text().replace("sha256:", "sha256:0", 1)[:-2] + "\n")
    action = _action(repo, requirements=Path("locks/app.txt"))
    with pytest.raises(BuildError) as caught:
        wrapped(ImageBuilder()).run(action, repo.ctx("tampered"), (app, lib))
    assert "hash" in str(caught.value).lower(), caught.value
    assert "thirdparty" in str(caught.value).lower() or caught.value.log is not None


def test_the_entry_script_runs_the_entry_point(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "app").mkdir(parents=True)
    (site / "app" / "__init__.py").write_text("")
    (site / "app" / "main.py").write_bytes(MAIN)
    (tmp_path / "pth").mkdir()
    (site / "extra.pth").write_text(str(tmp_path / "pth") + "\n")
    script = tmp_path / "run"
    script.write_bytes(entry_script("app.main:main", str(site)))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (0, "app says hi\n")
    probe = entry_script("sys:exit", str(site)).replace(b"sys.exit(exit())", b"print(sys.path)")
    script.write_bytes(probe)
    path = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=True
    ).stdout
    assert path.index(str(site)) < path.index(str(tmp_path / "pth")), ".pth dirs come after"


def test_split_site_reads_record_including_quoted_names(tmp_path: Path) -> None:
    info = tmp_path / "My.App-1.0.dist-info"
    info.mkdir()
    (info / "RECORD").write_text('my_app/x.py,,\n"my_app/a,b.py",,\n../../bin/tool,,\n')
    (tmp_path / "other-1.0.dist-info").mkdir()
    assert split_site(tmp_path, "my_app") == {
        "my_app/x.py",
        "my_app/a,b.py",
        "My.App-1.0.dist-info/RECORD",
    }


def test_a_second_binary_with_the_same_set_reuses_the_layer_without_writing_it(
    repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib = _lib(repo)
    one = _build(repo, _action(repo), repo.ctx("one"), _app(repo), lib)
    written: list[int] = []

    def counting(entries: Sequence[Entry], store: BlobStore, epoch: int, *, level: int) -> Layer:
        written.append(1)
        return write_layer(entries, store, epoch, level=level)

    monkeypatch.setattr(layers_module, "write_layer", counting)
    other = _action(repo, "other", "acme-other", id="image:other")
    two = _build(
        repo, other, repo.ctx("two", "4.5.6", EPOCH + 86400), _app(repo, "acme-other"), lib
    )
    assert len(written) == 1, "only the other binary's own layer is written (once: pure)"
    for platform in PLATFORMS:
        assert _digests(one[platform])[1:3] == _digests(two[platform])[1:3]
        deps = two[platform].layers[1]
        # In the layout, the reused blob is the store's file, linked, not a copy.
        assert deps.path.stat().st_nlink >= 2
        stored = repo.root / "c" / "oci" / "sha256" / deps.descriptor.digest[7:]
        assert deps.path.stat().st_ino == stored.stat().st_ino


def test_a_reused_layer_whose_blob_was_pruned_is_written_again(repo: Repo) -> None:
    lib = _lib(repo)
    first = _build(repo, _action(repo), repo.ctx("one"), _app(repo), lib)
    deps = first[PLATFORMS[0]].layers[1].descriptor.digest
    (repo.root / "c" / "oci" / "sha256" / deps[7:]).unlink()
    again = _build(repo, _action(repo), repo.ctx("two"), _app(repo), lib)
    assert _digests(again[PLATFORMS[0]]) == _digests(first[PLATFORMS[0]])
    assert (repo.root / "c" / "oci" / "sha256" / deps[7:]).is_file()


def test_another_gzip_level_makes_the_layer_again(repo: Repo) -> None:
    lib = _lib(repo)
    one = _build(repo, _action(repo), repo.ctx("one"), _app(repo), lib)
    wrapped(ImageBuilder(level=1)).run(_action(repo), repo.ctx("two"), (_app(repo), lib))
    two = _images(repo.ctx("two"))
    for platform in PLATFORMS:
        assert _digests(one[platform])[1] != _digests(two[platform])[1]
        assert one[platform].layers[1].diff_id == two[platform].layers[1].diff_id
