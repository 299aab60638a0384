"""The zipapp builder (offline): options, one universal or per-platform archives, keys.

The archive's writer and layout are test_archive.py's."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import zipfile
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from shipyard.builders import zipapp
from shipyard.builders.zipapp import (
    ZipappBuilder,
    ZipappOptions,
    options_for,
    write_archive,
)
from shipyard.builders.zipapp import _boot as boot
from shipyard.builders.zipapp._boot.layout import BUILD_INFO
from shipyard.engine.context import Slots
from shipyard.engine.plan import Action
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import Artifact, BuildContext
from shipyard.errors import BuildError, ShipyardError
from shipyard.stamp import Stamp
from tests.unit.builders.test_resolve import X86, make_wheel, offline_env

EPOCH = 1_700_000_000


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
        info = json.loads(archive.read(BUILD_INFO))
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
        info = json.loads(archive.read(BUILD_INFO))
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


def test_idle_job_slots_deflate_the_archive_and_its_bytes_do_not_depend_on_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx, wheel = _ctx(tmp_path), _wheel(tmp_path, "helper")
    builder = ZipappBuilder(lambda action: ZipappOptions("app:main"))
    asked: list[int] = []

    def writing(*args: Any, threads: int, **kwargs: Any) -> str:
        asked.append(threads)
        return write_archive(*args, threads=threads, **kwargs)

    monkeypatch.setattr(zipapp, "write_archive", writing)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    made = []
    for total in (1, 3, 20):
        slots = Slots(total)
        assert slots.take()  # the action's own slot, as the scheduler holds it
        (artifact,) = (
            wrapped(builder)
            .run(_action("linux/amd64"), replace(ctx, slots=slots), (wheel,))
            .outputs
        )
        assert not slots.lent  # the borrowed slots are given back
        made.append(artifact.path.read_bytes())
        assert artifact.sha256 == hashlib.sha256(made[-1]).hexdigest()
    assert asked == [1, 3, 8]  # its own slot and the idle ones, at most one per core
    assert made[0] == made[1] == made[2]


def test_the_site_is_removed_while_the_archive_is_written_only_from_the_build_folder(
    tmp_path: Path,
) -> None:
    build, elsewhere = tmp_path / "build", tmp_path / "elsewhere"
    for site in (build / "linux_amd64", elsewhere):
        (site / "pkg").mkdir(parents=True)
        (site / "pkg" / "mod.py").write_text("")
    with zipapp._removing(build / "linux_amd64", build):
        pass
    assert not (build / "linux_amd64").exists()
    with zipapp._removing(elsewhere, build):
        pass
    assert (elsewhere / "pkg" / "mod.py").is_file()
