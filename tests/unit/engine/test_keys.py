"""One key per action, from a declared, canonical set of inputs (issue 13).

For each builder the test takes a scene (an action, a context, its inputs'
artifacts) in a checkout, then changes one thing at a time. Each declared input
has a change that moves that input, and only that one, and so the key; the
checkout's path, the time of day, environment variables nobody declared, where
an image is pushed and the job budget move nothing.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType, SimpleNamespace

import pytest

from shipyard.artifacts import Artifact
from shipyard.builders import kinds as kinds_module
from shipyard.builders import wheel as wheel_module
from shipyard.builders import zipapp as zipapp_module
from shipyard.builders.kinds import ImageKinds
from shipyard.builders.wheel import WheelBuilder
from shipyard.builders.zipapp import ZipappBuilder, ZipappOptions
from shipyard.builders.zipapp import archive as zipapp_archive
from shipyard.engine.context import BuildContext, Builder, Slots
from shipyard.engine.keys import ActionKey, canonical
from shipyard.engine.plan import Action
from shipyard.engine.run import wrapped
from shipyard.files.sources import GitIgnored
from shipyard.manifest import Image as ImageSettings
from shipyard.manifest import Variant
from shipyard.oci import keep as keep_module
from shipyard.stamp import Stamp

WHEEL = Artifact("wheel", "", "py3-none-any", Path("w.whl"), "a" * 64, 10)


@dataclass(frozen=True)
class Scene:
    """What a key is computed from: the builder, the action, the context, the deps."""

    builder: Builder
    action: Action
    ctx: BuildContext
    deps: tuple[Artifact, ...] = (WHEEL,)

    def key(self) -> ActionKey:
        return wrapped(self.builder).key(self.action, self.ctx, self.deps)


Change = Callable[[Scene, pytest.MonkeyPatch], Scene]


def _checkout(root: Path) -> Path:
    """A checkout with a source, a lock file, base layouts and a Dockerfile folder."""
    (root / "app" / "app").mkdir(parents=True)
    (root / "app" / "pyproject.toml").write_text("[project]\nname = 'app'\n")
    (root / "app" / "app" / "__init__.py").write_text("def main():\n    return 0\n")
    (root / "lock.txt").write_text("helper==2.0 --hash=sha256:" + "0" * 64 + "\n")
    (root / "base").mkdir()
    (root / "base" / "index.json").write_text('{"schemaVersion": 2, "manifests": []}\n')
    (root / "slim").mkdir()  # a variant's base
    (root / "slim" / "index.json").write_text('{"schemaVersion": 2, "manifests": []}\n')
    (root / "docker").mkdir()
    (root / "docker" / "Dockerfile").write_text("FROM scratch\n")
    return root


def _ctx(root: Path, env: dict[str, str] | None = None) -> BuildContext:
    stamp = Stamp("1.2.3", "abc123", False, 1_700_000_000)
    return BuildContext(root, root / "dist", stamp, "3.11", env or {"HOME": "/home/a"})


def _settings(**changes: object) -> ImageSettings:
    base = ImageSettings(
        base="oci-layout:base",
        user="65532",
        workdir="/srv",
        env=MappingProxyType({"LOG_LEVEL": "info"}),
        labels=MappingProxyType({"team": "x"}),
        variants=MappingProxyType({"slim": Variant(base="oci-layout:slim")}),
        hubs=("127.0.0.1:5000/a",),
        tags=("latest",),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _image_action(root: Path, settings: ImageSettings) -> Action:
    platforms = ("linux/amd64", "linux/arm64")
    return Action(
        "image:app",
        "image",
        ("app",),
        root / "app",
        platforms,
        ("wheel:app",),
        entrypoint="app:main",
        image=settings,
        requirements=Path("lock.txt"),
    )


def wheel_scene(root: Path) -> Scene:
    return Scene(
        WheelBuilder(), Action("wheel:app", "wheel", ("app",), root / "app"), _ctx(root), ()
    )


def zipapp_scene(root: Path, **options: object) -> Scene:
    opts = ZipappOptions("app:main")
    chosen = dataclasses.replace(opts, **options)  # type: ignore[arg-type]
    action = Action(
        "zipapp:app",
        "zipapp",
        ("app",),
        root / "app",
        ("linux/amd64",),
        ("wheel:app",),
        requirements=Path("lock.txt"),
    )
    return Scene(ZipappBuilder(lambda _: chosen), action, _ctx(root))


def image_scene(root: Path) -> Scene:
    return Scene(ImageKinds(), _image_action(root, _settings()), _ctx(root))


def dockerfile_scene(root: Path) -> Scene:
    settings = _settings(dockerfile="docker/Dockerfile")
    return Scene(ImageKinds(), _image_action(root, settings), _ctx(root))


def _stamp(**changes: object) -> Change:
    return lambda s, _: replace(s, ctx=replace(s.ctx, stamp=replace(s.ctx.stamp, **changes)))  # type: ignore[arg-type]


def _version(module: object) -> Change:
    def change(s: Scene, mp: pytest.MonkeyPatch) -> Scene:
        mp.setattr(module, "__version__", "99.0")
        return s

    return change


def _edit(rel: str, text: str) -> Change:
    def change(s: Scene, _: pytest.MonkeyPatch) -> Scene:
        (s.ctx.root / rel).write_text(text)
        return s

    return change


def _image(**changes: object) -> Change:
    def change(s: Scene, _: pytest.MonkeyPatch) -> Scene:
        assert s.action.image is not None
        settings = dataclasses.replace(s.action.image, **changes)  # type: ignore[arg-type]
        return replace(s, action=replace(s.action, image=settings))

    return change


def _python(s: Scene, mp: pytest.MonkeyPatch) -> Scene:
    mp.setattr(wheel_module, "sys", SimpleNamespace(version_info=(3, 99, 0), executable="py"))
    return s


def _zipapp(**options: object) -> Change:
    return lambda s, _: zipapp_scene(s.ctx.root, **options)


STAMP = {
    "stamp (version)": _stamp(version="1.2.4"),
    "stamp (revision)": _stamp(revision="def456"),
    "stamp (dirty)": _stamp(dirty=True),
    "stamp (clock)": _stamp(epoch=1_800_000_000),
}
COMMON: dict[str, Change] = {
    "wheels": lambda s, _: replace(s, deps=(replace(WHEEL, sha256="b" * 64),)),
    "platforms": lambda s, _: replace(s, action=replace(s.action, platforms=("linux/arm64",))),
}


def _extras(s: Scene, _: pytest.MonkeyPatch) -> Scene:
    """The binary's own project's extras, installed with it (zipapps and images)."""
    return replace(s, action=replace(s.action, extras=("cli",)))


# Builder -> (the scene, each declared input -> a change that moves it alone).
DECLARED: dict[str, tuple[Callable[[Path], Scene], dict[str, Change]]] = {
    "wheel": (
        wheel_scene,
        {
            "shipyard": _version(wheel_module),
            "source": _edit("app/app/__init__.py", "def main():\n    return 1\n"),
            "python": _python,
            **STAMP,
        },
    ),
    "zipapp": (
        zipapp_scene,
        {
            "shipyard": _version(zipapp_module),
            "boot": lambda s, mp: (
                mp.setattr(zipapp_archive, "_boot_sources", lambda: {"boot": b"#"}),
                s,
            )[1],
            **COMMON,
            "entrypoint": _zipapp(entrypoint="app:other"),
            "shebang": _zipapp(shebang="/usr/bin/python3.11"),
            "compress": _zipapp(compress=False),
            "compile": _zipapp(compile=True),
            "extras": _extras,
            "lock": _edit("lock.txt", "helper==2.1 --hash=sha256:" + "1" * 64 + "\n"),
            "python": lambda s, _: replace(s, ctx=replace(s.ctx, python="3.12")),
            **STAMP,
        },
    ),
    "image": (
        image_scene,
        {
            "shipyard": _version(kinds_module),
            "gzip_level": lambda s, mp: (mp.setattr(kinds_module, "GZIP_LEVEL", 9), s)[1],
            **COMMON,
            "entrypoint": lambda s, _: replace(s, action=replace(s.action, entrypoint="app:x")),
            "settings": _image(user="1000"),
            "extras": _extras,
            "base": _edit("base/index.json", '{"schemaVersion": 2, "manifests": [{}]}\n'),
            # What a variant's base holds, not only its name (in "settings").
            "variant_bases": _edit("slim/index.json", '{"schemaVersion": 2, "manifests": [{}]}\n'),
            # The lock images install from (issue 14: they used to ignore it).
            "lock": _edit("lock.txt", "helper==2.1 --hash=sha256:" + "1" * 64 + "\n"),
            "python": lambda s, _: replace(s, ctx=replace(s.ctx, python="3.12")),
            "source_url": lambda s, _: replace(
                s, ctx=replace(s.ctx, env={**s.ctx.env, "SHIPYARD_SOURCE_URL": "https://x/y"})
            ),
            # Other platforms of the same build kept from dist/ (issue 18, item 2).
            "kept": lambda s, mp: (
                mp.setattr(keep_module, "kept_platforms", lambda *_: [("linux/s390x", "d")]),
                s,
            )[1],
            **STAMP,
        },
    ),
    "dockerfile": (
        dockerfile_scene,
        {
            "shipyard": _version(kinds_module),
            "context": _edit("docker/Dockerfile", "FROM scratch\nLABEL a=b\n"),
            **COMMON,
            "settings": _image(labels=MappingProxyType({"team": "y"})),
            **STAMP,
        },
    ),
}
CASES = [
    pytest.param(builder, name, id=f"{builder}: {name}")
    for builder, (_, changes) in DECLARED.items()
    for name in changes
]


def _name(label: str) -> str:
    return label.split(" (", 1)[0]


@pytest.mark.parametrize("builder", list(DECLARED))
def test_the_declared_inputs_are_exactly_what_each_builder_hashes(
    tmp_path: Path, builder: str
) -> None:
    scene_of, changes = DECLARED[builder]
    inputs = scene_of(_checkout(tmp_path)).key().inputs
    assert set(inputs) - {"builder"} == {_name(label) for label in changes}


@pytest.mark.parametrize(("builder", "label"), CASES)
def test_each_declared_input_changes_the_key_and_only_that_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, builder: str, label: str
) -> None:
    scene_of, changes = DECLARED[builder]
    scene = scene_of(_checkout(tmp_path))
    before = scene.key()
    after = changes[label](scene, monkeypatch).key()
    assert after.digest != before.digest
    moved = {name for name in before.inputs if before.inputs[name] != after.inputs[name]}
    assert moved == {_name(label)}


@pytest.mark.parametrize("builder", list(DECLARED))
def test_nothing_undeclared_changes_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, builder: str
) -> None:
    """Another checkout path, another time of day, other environment variables,
    other hubs and tags, a job budget or git's view of the tree: the same key."""
    scene_of, _ = DECLARED[builder]
    first = _checkout(tmp_path / "one")
    key = scene_of(first).key().digest
    moved = tmp_path / "elsewhere" / "deeper"
    shutil.copytree(first, moved)
    monkeypatch.setattr(time, "time", lambda: 1_900_000_000.0 + 12 * 3600)
    monkeypatch.setenv("SOMETHING_UNRELATED", "1")
    scene = scene_of(moved)
    env = {"HOME": "/home/b", "PATH": "/opt/bin", "SHIPYARD_CACHE_DIR": "/elsewhere"}
    ctx = replace(scene.ctx, env=env, slots=Slots(7), git=GitIgnored(moved))
    action = scene.action
    if action.image is not None:
        pushed = dataclasses.replace(action.image, hubs=("10.0.0.1:5000/b",), tags=("x", "y"))
        action = replace(action, image=pushed)
    assert replace(scene, ctx=ctx, action=action).key().digest == key


def test_keys_are_canonical_json_not_repr() -> None:
    """Mapping order, tuples versus lists: the same key; a value's type counts."""
    one = ActionKey.of("zipapp", {"a": 1, "b": {"y": [1, 2], "x": "s"}})
    two = ActionKey.of("zipapp", {"b": {"x": "s", "y": (1, 2)}, "a": 1})
    assert one.digest == two.digest
    assert ActionKey.of("zipapp", {"a": "1"}).digest != ActionKey.of("zipapp", {"a": 1}).digest
    assert ActionKey.of("wheel", {"a": 1}).digest != one.digest
    assert canonical({"b": [1], "a": None}) == b'{"a":null,"b":[1]}'
    with pytest.raises(TypeError, match="JSON data"):
        ActionKey.of("wheel", {"path": Path("/x")})  # type: ignore[dict-item]
