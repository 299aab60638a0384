"""Zipapp archives: the deterministic writer, the layout, and the builder (offline)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import marshal
import os
import subprocess
import sys
import zipfile
from importlib.util import MAGIC_NUMBER, source_hash
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from shipyard.builders.zipapp import (
    DEFAULT_SHEBANG,
    Entry,
    ZipappBuilder,
    ZipappOptions,
    layout,
    options_for,
    write_archive,
)
from shipyard.builders.zipapp import _boot as boot
from shipyard.engine.plan import Action
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import Artifact, BuildContext
from shipyard.errors import BuildError, ShipyardError
from shipyard.stamp import Stamp
from tests.unit.builders.test_resolve import X86, make_wheel, offline_env

ENTRIES = [
    Entry("site/pkg/__init__.py", b"x = 1\n"),
    Entry("site/pkg/tool.so", b"\x7fELF", 0o755),
    Entry("__main__.py", b"print('hi')\n"),
    Entry("site/mod.py", b"y = 2\n"),
]
EPOCH = 1_700_000_000


def test_the_archive_is_a_shebang_then_a_sorted_zip_with_one_time_and_normal_modes(
    tmp_path: Path,
) -> None:
    write_archive(tmp_path / "a.pyz", "#!/usr/bin/python3.11", ENTRIES, EPOCH, compress=True)
    assert (tmp_path / "a.pyz").read_bytes().startswith(b"#!/usr/bin/python3.11\nPK")
    with zipfile.ZipFile(tmp_path / "a.pyz") as archive:
        assert archive.testzip() is None
        infos = archive.infolist()
        names = [i.filename for i in infos]
        assert names == sorted(names)
        # No folder entries: the bootstrap makes the folders of what it unpacks.
        assert names == ["__main__.py", "site/mod.py", "site/pkg/__init__.py", "site/pkg/tool.so"]
        assert {i.date_time for i in infos} == {(2023, 11, 14, 22, 13, 20)}
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in infos}
        assert modes == {
            "__main__.py": 0o644,
            "site/mod.py": 0o644,
            "site/pkg/__init__.py": 0o644,
            "site/pkg/tool.so": 0o755,
        }
        assert {i.compress_type for i in infos} == {zipfile.ZIP_DEFLATED}
        assert archive.read("site/pkg/tool.so") == b"\x7fELF"


def test_the_bytes_depend_only_on_the_entries_not_their_order(tmp_path: Path) -> None:
    write_archive(tmp_path / "a.pyz", DEFAULT_SHEBANG, ENTRIES, EPOCH, compress=True)
    write_archive(tmp_path / "b.pyz", DEFAULT_SHEBANG, ENTRIES[::-1], EPOCH, compress=True)
    assert (tmp_path / "a.pyz").read_bytes() == (tmp_path / "b.pyz").read_bytes()
    write_archive(tmp_path / "c.pyz", DEFAULT_SHEBANG, ENTRIES, EPOCH + 2, compress=True)
    assert (tmp_path / "a.pyz").read_bytes() != (tmp_path / "c.pyz").read_bytes()


def test_uncompressed_archives_and_clocks_before_1980(tmp_path: Path) -> None:
    write_archive(tmp_path / "a.pyz", "/usr/bin/env python3", ENTRIES, 0, compress=False)
    assert (tmp_path / "a.pyz").read_bytes().startswith(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(tmp_path / "a.pyz") as archive:
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_STORED}
        assert archive.infolist()[0].date_time == (1980, 1, 1, 0, 0, 0)


def _site(root: Path) -> Path:
    files = {
        "app/__init__.py": "def main():\n    return 0\n",
        "app/util.py": "",
        "app/data.txt": "",
        "app/__pycache__/util.cpython-311.pyc": "",
        "fast/__init__.py": "",
        "fast/_c.cpython-311-x86_64-linux-gnu.so": "",
        "fast.libs/libz-1a2b.so.1.2.13": "",
        "single.py": "",
        "bin/app": "#!/somewhere/python\n",
        "app-1.0.dist-info/METADATA": "Name: app\n",
        "not-a-module/x.py": "",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _boot_data(entries: list[Entry]) -> dict[str, object]:
    data = next(e.data for e in entries if e.name == boot.BOOT_DATA)
    loaded = marshal.loads(data)
    assert isinstance(loaded, dict)
    return loaded


def test_layout_ships_the_site_the_bootstrap_and_the_build_info(tmp_path: Path) -> None:
    entries = layout(_site(tmp_path / "site"), {"binary": "app"})
    names = {e.name for e in entries}
    assert {"__main__.py", boot.SOURCE, boot.BUILD_INFO, boot.BOOT_DATA} <= names
    site = {n.removeprefix("site/") for n in names if n.startswith("site/")}
    assert site == {
        "app/__init__.py",
        "app/util.py",
        "app/data.txt",
        "fast/__init__.py",
        "fast/_c.cpython-311-x86_64-linux-gnu.so",
        "fast.libs/libz-1a2b.so.1.2.13",
        "single.py",
        "app-1.0.dist-info/METADATA",
        "not-a-module/x.py",
    }  # no stale __pycache__, no scripts with the installer's shebang
    info = json.loads(next(e.data for e in entries if e.name == boot.BUILD_INFO))
    assert info == _boot_data(entries)  # what the bootstrap reads is what users read
    assert set(info) == {"binary", "native", "compiled", "build_id"}
    assert (info["native"], info["compiled"]) == (True, False)
    assert next(e for e in entries if e.name.endswith(".so")).mode == 0o755


def test_the_build_id_follows_the_content_not_the_build_info(tmp_path: Path) -> None:
    site = _site(tmp_path / "site")

    def build_id(info: dict[str, object]) -> object:
        return _boot_data(layout(site, info))["build_id"]

    first = build_id({"version": "1"})
    assert build_id({"version": "2"}) == first
    (site / "app" / "util.py").write_text("changed = True\n")
    assert build_id({"version": "1"}) != first


def test_compiled_layouts_put_pyc_files_where_python_looks(tmp_path: Path) -> None:
    site = _site(tmp_path / "site")
    entries = layout(site, {}, compile_pyc=True)
    tag = sys.implementation.cache_tag
    pyc = {e.name for e in entries if e.name.endswith(".pyc")}
    assert pyc == {
        f"site/app/__pycache__/__init__.{tag}.pyc",
        f"site/app/__pycache__/util.{tag}.pyc",
        f"site/__pycache__/single.{tag}.pyc",
        f"site/fast/__pycache__/__init__.{tag}.pyc",
    }
    assert layout(site, {}, compile_pyc=True) == entries  # deterministic
    header = next(e.data for e in entries if e.name.endswith(f"util.{tag}.pyc"))[:16]
    # Unchecked hash-based (PEP 552 flags 0b01): trusted without reading the source.
    assert header[:4] == MAGIC_NUMBER and int.from_bytes(header[4:8], "little") == 1
    assert header[8:] == source_hash(b"")


def test_options_come_from_the_action_with_defaults() -> None:
    bare = Action("zipapp:x", "zipapp", ("x",), Path("/src"), ("linux/amd64",))
    assert options_for(bare) == ZipappOptions(entrypoint="")
    wired = SimpleNamespace(
        entrypoint="x.cli:main",
        zipapp=SimpleNamespace(shebang="/usr/bin/python3.11", compress=False, compile=True),
    )
    assert options_for(cast(Action, wired)) == ZipappOptions(
        "x.cli:main", "/usr/bin/python3.11", False, True
    )


def _ctx(tmp_path: Path) -> BuildContext:
    stamp = Stamp("1.2.3", "abcdef0123456789", True, EPOCH)
    links = tmp_path / "links"
    make_wheel(links, "helper", "2.0", files={"helper/__init__.py": "NAME = 'helper'\n"})
    make_wheel(links, "fast", "1.5", X86, {"fast/__init__.py": "", "fast/_c.so": b"\x7fELF"})
    return BuildContext(tmp_path, tmp_path / "dist", stamp, "3.11", offline_env(tmp_path, links))


def _wheel(tmp_path: Path, *requires: str) -> Artifact:
    main = "import helper\ndef main():\n    print(helper.NAME)\n    return 4\n"
    wheel = make_wheel(
        tmp_path / "w", "app", "1.0", files={"app/__init__.py": main}, requires=requires
    )
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return Artifact("wheel", "", "py3-none-any", wheel, digest, wheel.stat().st_size)


def _key(
    builder: ZipappBuilder, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]
) -> str:
    """The key the engine computes for `action` from the builder's declared inputs."""
    return wrapped(builder).key(action, ctx, deps).digest


def _action(*platforms: str) -> Action:
    return Action("zipapp:app", "zipapp", ("app",), Path("/src"), platforms, ("wheel:app",))


def test_pure_dependencies_make_one_universal_reproducible_zipapp(tmp_path: Path) -> None:
    ctx, wheel = _ctx(tmp_path), _wheel(tmp_path, "helper")
    builder = ZipappBuilder(lambda action: ZipappOptions("app:main"))
    action = _action("linux/amd64", "linux/arm64")
    outcome = wrapped(builder).run(action, ctx, (wheel,))
    (artifact,) = outcome.outputs
    assert artifact.path == ctx.dist / "zipapps" / "app-1.2.3.pyz"
    assert artifact.path.stat().st_mode & 0o777 == 0o755
    assert outcome.inputs == _key(builder, action, ctx, (wheel,))
    env = {**os.environ, boot.ROOT_ENV: str(tmp_path / "cache")}
    done = subprocess.run([artifact.path], env=env, capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (4, "helper\n")
    with zipfile.ZipFile(artifact.path) as archive:
        info = json.loads(archive.read(boot.BUILD_INFO))
    assert info["platform"] == "any" and info["platforms"] == ["linux/amd64", "linux/arm64"]
    assert (info["version"], info["revision"], info["dirty"]) == ("1.2.3", "abcdef0123456789", True)
    assert info["created"] == "2023-11-14T22:13:20Z" and info["entrypoint"] == "app:main"
    assert info["distributions"] == {"app": "1.0", "helper": "2.0"}
    first = artifact.path.read_bytes()
    wrapped(builder).run(action, ctx, (wheel,))
    assert artifact.path.read_bytes() == first
    assert not [p for p in ctx.dist.iterdir() if p.name.startswith(".tmp-")]


def test_native_dependencies_make_one_zipapp_per_platform(tmp_path: Path) -> None:
    ctx, wheel = _ctx(tmp_path), _wheel(tmp_path, "helper", "fast")
    builder = ZipappBuilder(lambda action: ZipappOptions("app:main", compress=False))
    outcome = wrapped(builder).run(_action("linux/amd64"), ctx, (wheel,))
    assert [a.path.name for a in outcome.outputs] == ["app-1.2.3-linux_amd64.pyz"]
    with zipfile.ZipFile(outcome.outputs[0].path) as archive:
        info = json.loads(archive.read(boot.BUILD_INFO))
    assert (info["platform"], info["native"]) == ("linux/amd64", True)
    with pytest.raises(BuildError, match="no wheel of fast for linux/arm64"):
        wrapped(builder).run(_action("linux/amd64", "linux/arm64"), ctx, (wheel,))


def test_an_entrypoint_outside_the_resolution_is_a_build_error(tmp_path: Path) -> None:
    ctx, wheel = _ctx(tmp_path), _wheel(tmp_path, "helper")
    builder = ZipappBuilder(lambda action: ZipappOptions("nosuch.cli:main"))
    with pytest.raises(BuildError, match=r"no module nosuch in app's wheel"):
        wrapped(builder).run(_action("linux/amd64"), ctx, (wheel,))
    assert not (ctx.dist / "zipapps").exists()


@pytest.mark.parametrize(
    ("entrypoint", "problem"),
    [
        ("app.clii:main", "no module app.clii in app's wheel or its dependencies"),
        ("app:mian", "module app has no mian (did you mean main?)"),
    ],
)
def test_a_wrong_name_inside_the_package_is_bad_input_at_build(
    tmp_path: Path, entrypoint: str, problem: str
) -> None:
    """Regression (issue 25, item 5): only the top-level package was looked for, so the
    zipapp was written and died with a traceback when run."""
    ctx, wheel = _ctx(tmp_path), _wheel(tmp_path, "helper")
    builder = ZipappBuilder(lambda action: ZipappOptions(entrypoint))
    with pytest.raises(BuildError) as caught:
        wrapped(builder).run(_action("linux/amd64"), ctx, (wheel,))
    assert f"entrypoint {entrypoint}: {problem} (linux/amd64)" in str(caught.value)
    cause = caught.value.__cause__
    assert isinstance(cause, ShipyardError) and cause.exit_code == 2
    assert not (ctx.dist / "zipapps").exists()


def test_missing_inputs_are_build_errors_before_anything_runs(tmp_path: Path) -> None:
    ctx, wheel = _ctx(tmp_path), _wheel(tmp_path)
    with pytest.raises(BuildError, match="no entrypoint"):
        wrapped(ZipappBuilder()).run(_action("linux/amd64"), ctx, (wheel,))
    with pytest.raises(BuildError, match="expected the wheel"):
        wrapped(ZipappBuilder(lambda a: ZipappOptions("app:main"))).run(
            _action("linux/amd64"), ctx, ()
        )


def test_the_key_follows_options_platforms_stamp_and_wheel(tmp_path: Path) -> None:
    ctx, wheel = _ctx(tmp_path), _wheel(tmp_path)
    plain = ZipappBuilder(lambda a: ZipappOptions("app:main"))
    key = _key(plain, _action("linux/amd64"), ctx, (wheel,))
    assert _key(plain, _action("linux/amd64"), ctx, (wheel,)) == key
    assert _key(plain, _action("linux/arm64"), ctx, (wheel,)) != key
    other = dataclasses.replace(wheel, sha256="f" * 64)
    assert _key(plain, _action("linux/amd64"), ctx, (other,)) != key
    compiled = ZipappBuilder(lambda a: ZipappOptions("app:main", compile=True))
    assert _key(compiled, _action("linux/amd64"), ctx, (wheel,)) != key
    later = BuildContext(ctx.root, ctx.dist, Stamp("1.2.4", None, False, EPOCH), "3.11", ctx.env)
    assert _key(plain, _action("linux/amd64"), later, (wheel,)) != key


def test_the_key_follows_the_lock_file_bytes_not_its_path(tmp_path: Path) -> None:
    ctx, wheel = _ctx(tmp_path), _wheel(tmp_path)
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "lock.txt").write_text("helper==2.0 --hash=sha256:" + "0" * 64)

    def key(lock: str) -> str:
        builder = ZipappBuilder(lambda a: ZipappOptions("app:main"))
        action = dataclasses.replace(_action("linux/amd64"), requirements=Path(lock))
        return _key(builder, action, ctx, (wheel,))

    assert key("a/lock.txt") == key(str(tmp_path / "b" / "lock.txt"))
    (tmp_path / "b" / "lock.txt").write_text("helper==2.1 --hash=sha256:" + "1" * 64)
    assert key("a/lock.txt") != key("b/lock.txt")
