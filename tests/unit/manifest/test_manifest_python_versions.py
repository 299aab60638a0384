"""Issue 15, item 2: `project.python` as a list of target Pythons.

The manifest's forms (one version, a list) and what they become: zipapp actions that
resolve for each Python and the archives they write (one for everything when it is
all pure, else one per Python, named `-py3.12`), the bootstrap's check of the
interpreter, and images whose base uses `${python}`: one more variant per Python
(`python3.12`, tags `-python3.12`), resolved for it. The bad forms are the
`python-*` cases of tests/manifests (exit 2, file:line:col and the fix).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from shipyard.artifacts import select
from shipyard.builders.distributions import Distribution
from shipyard.builders.image import ImageBuilder
from shipyard.builders.image.archives import write_archive
from shipyard.builders.image.variants import plan_variants, variant_of
from shipyard.builders.kinds import ImageKinds
from shipyard.builders.resolve import Resolution
from shipyard.builders.zipapp import ZipappBuilder, archive_file
from shipyard.builders.zipapp import _boot as boot
from shipyard.builders.zipapp.targets import plan_archives
from shipyard.engine.keys import canonical
from shipyard.engine.plan import Selection, make_plan
from shipyard.engine.run import wrapped
from shipyard.errors import ManifestError
from shipyard.manifest import Image as ImageSettings
from shipyard.manifest import Manifest, Variant, load_manifest
from shipyard.manifest._cached import manifest_from_json, manifest_to_json
from shipyard.oci.remote.push import variant_tags
from tests.unit.builders.image.test_image_builder import _action, _ctx, _deps, repo
from tests.unit.builders.image.test_variants import Resolver, _layout_base

__all__ = ["repo"]  # the fixture, imported for its name

MANIFEST = """\
schema: 1
project:
  name: demo
  python: {python}
binaries:
  app:
    source: app
    entrypoint: app.main:main
    outputs: [zipapp, image]
    image:
      base: "{base}"
      variants:
        debug: {{base: "{base}-debug", env: {{D: "1"}}}}
        slim: {{base: "oci-layout:slim"}}
"""
TEMPLATE = "oci-layout:.shipyard/base/python-${python}"


def _load(
    tmp_path: Path,
    python: str,
    base: str = TEMPLATE,
    env: dict[str, str] | None = None,
    text: str = MANIFEST,
) -> Manifest:
    (tmp_path / ".git").mkdir(exist_ok=True)
    (tmp_path / "app").mkdir(exist_ok=True)
    (tmp_path / "app" / "pyproject.toml").write_text("[project]\nname = 'app'\nversion = '1'\n")
    path = tmp_path / "binaries.yaml"
    path.write_text(text.format(python=python, base=base))
    return load_manifest(path, env or {})


# --- the manifest ----------------------------------------------------------------------


def test_one_version_is_a_list_of_one_and_changes_nothing(tmp_path: Path) -> None:
    manifest = _load(tmp_path, '"3.12"')
    assert manifest.project.python == "3.12" and manifest.project.pythons == ("3.12",)
    image = manifest.binaries["app"].image
    assert image.base == "oci-layout:.shipyard/base/python-3.12"  # ${python} expanded
    assert sorted(image.variants) == ["debug", "slim"]  # no per-Python variant
    assert image.variants["debug"].base == "oci-layout:.shipyard/base/python-3.12-debug"
    assert all(v.python is None for v in image.variants.values())


def test_the_default_is_3_11(tmp_path: Path) -> None:
    text = MANIFEST.replace("  python: {python}\n", "")
    manifest = _load(tmp_path, "", text=text)
    assert manifest.project.pythons == ("3.11",)
    assert manifest.binaries["app"].image.base == "oci-layout:.shipyard/base/python-3.11"


def test_a_list_adds_a_variant_per_other_python(tmp_path: Path) -> None:
    manifest = _load(tmp_path, '["3.11", "3.12", "3.13"]')
    assert manifest.project.python == "3.11"
    assert manifest.project.pythons == ("3.11", "3.12", "3.13")
    image = manifest.binaries["app"].image
    assert image.base == "oci-layout:.shipyard/base/python-3.11"  # the first: the default
    found = {n: (v.base, dict(v.env), v.python) for n, v in image.variants.items()}
    base = "oci-layout:.shipyard/base/python-"
    assert found == {
        "debug": (f"{base}3.11-debug", {"D": "1"}, None),
        "slim": ("oci-layout:slim", {}, None),  # its base has no ${python}: the first's only
        "python3.12": (f"{base}3.12", {}, "3.12"),
        "python3.13": (f"{base}3.13", {}, "3.13"),
        "debug-python3.12": (f"{base}3.12-debug", {"D": "1"}, "3.12"),
        "debug-python3.13": (f"{base}3.13-debug", {"D": "1"}, "3.13"),
    }
    # What the manifest cache stores reads back the same.
    again = manifest_from_json(json.loads(json.dumps(manifest_to_json(manifest))))
    assert again == manifest


def test_without_python_in_the_base_only_the_first_python_gets_an_image(tmp_path: Path) -> None:
    manifest = _load(tmp_path, '["3.11", "3.12"]', base="oci-layout:base")
    assert sorted(manifest.binaries["app"].image.variants) == ["debug", "slim"]
    plan = make_plan(manifest, Selection(), "linux")
    image = next(a for a in plan.actions if a.kind == "image")
    assert image.pythons == ("3.11",)


def test_python_is_not_an_environment_variable(tmp_path: Path) -> None:
    manifest = _load(tmp_path, '["3.12"]', env={"python": "9.9", "TAG": "x"})
    assert manifest.binaries["app"].image.base == "oci-layout:.shipyard/base/python-3.12"


@pytest.mark.parametrize(
    ("env", "base"),
    [
        ({}, "oci-layout:.shipyard/base/python-3.12"),
        ({"BASE": "oci-layout:elsewhere/py${python}"}, "oci-layout:elsewhere/py3.12"),
        ({"BASE": "oci-layout:fixed"}, "oci-layout:fixed"),
    ],
)
def test_python_may_be_in_a_variables_default(
    tmp_path: Path, env: dict[str, str], base: str
) -> None:
    manifest = _load(
        tmp_path,
        '["3.11", "3.12"]',
        base="${BASE:-oci-layout:.shipyard/base/python-${python}}",
        env=env,
    )
    image = manifest.binaries["app"].image
    if "${python}" in env.get("BASE", "${python}"):
        assert image.variants["python3.12"].base == base
    else:  # the variable's value has no ${python}: the first Python's image only
        assert image.base == base and "python3.12" not in image.variants


def test_a_dockerfile_image_gets_no_per_python_variants(tmp_path: Path) -> None:
    text = """\
schema: 1
project: {{name: demo, python: {python}}}
binaries:
  app:
    source: app
    entrypoint: app.main:main
    outputs: [image]
    image: {{base: "{base}", dockerfile: app/Dockerfile}}
"""
    manifest = _load(tmp_path, '["3.11", "3.12"]', text=text)
    assert dict(manifest.binaries["app"].image.variants) == {}


def test_compiled_zipapps_need_one_python(tmp_path: Path) -> None:
    text = MANIFEST.replace("    outputs:", "    zipapp: {{compile: true}}\n    outputs:")
    with pytest.raises(ManifestError) as caught:
        _load(tmp_path, '["3.11", "3.12"]', text=text)
    (problem,) = caught.value.problems
    assert (problem.location.line, problem.location.column) == (9, 23)
    assert problem.path == "binaries.app.zipapp.compile"
    assert "project.python lists 3.11, 3.12" in problem.message
    assert problem.hint.startswith("set compile: false")
    assert caught.value.exit_code == 2


# --- the plan and the keys -------------------------------------------------------------


def test_the_plan_shows_each_actions_pythons(tmp_path: Path) -> None:
    manifest = _load(tmp_path, '["3.11", "3.12", "3.13"]')
    listed: list[dict[str, Any]] = make_plan(manifest, Selection(), "linux").to_json()["actions"]  # type: ignore[assignment]
    actions = {a["id"]: a for a in listed}
    assert actions["zipapp:app"]["pythons"] == ["3.11", "3.12", "3.13"]
    assert actions["image:app"]["pythons"] == ["3.11", "3.12", "3.13"]
    assert "pythons" not in actions["wheel:app"]


def test_the_zipapp_key_names_every_python(repo: Path) -> None:
    action = dataclasses.replace(_action(repo), kind="zipapp", image=None, id="zipapp:app")
    builder = ZipappBuilder()

    def key(*pythons: str) -> Any:
        return builder.inputs(dataclasses.replace(action, pythons=pythons), _ctx(repo), _deps(repo))

    assert key()["python"] == "3.11" == key("3.11")["python"]  # one: as before
    assert key("3.11", "3.12")["python"] == ["3.11", "3.12"]
    assert (
        len(
            {canonical(key("3.11")), canonical(key("3.11", "3.12")), canonical(key("3.12", "3.11"))}
        )
        == 3
    )


def test_the_image_key_follows_a_variants_python(repo: Path) -> None:
    def key(python: str | None) -> Any:
        settings = ImageSettings(
            base="oci-layout:base",
            variants=MappingProxyType({"python3.12": Variant("oci-layout:b", python=python)}),
        )
        return ImageKinds().inputs(
            dataclasses.replace(_action(repo), image=settings), _ctx(repo), _deps(repo)
        )

    assert key("3.12")["settings"]["variants"]["python3.12"]["python"] == "3.12"
    assert "python" not in key(None)["settings"]["variants"]["python3.12"]
    assert canonical(key("3.12")) != canonical(key("3.13"))


# --- which archives a zipapp build writes ----------------------------------------------


def _resolution(python: str, platform: str, *, pure: bool, extra: str = "") -> Resolution:
    dists = (Distribution("app", "1", True), Distribution("dep" + extra, "1", pure))
    return Resolution(platform, Path(f"/{python}/{platform}"), dists, pure)


def _shapes(pythons: Sequence[str], platforms: Sequence[str], made: Any) -> list[tuple[Any, ...]]:
    resolutions = [made(py, p) for py in pythons for p in platforms]
    return [
        (a.named, a.pythons, a.universal, a.resolution.platform, len(a.covered))
        for a in plan_archives(pythons, platforms, resolutions)
    ]


def test_all_pure_and_the_same_is_one_archive_for_every_python() -> None:
    shapes = _shapes(
        ("3.11", "3.12"),
        ("linux/amd64", "darwin/arm64"),
        lambda py, p: _resolution(py, p, pure=True),
    )
    assert shapes == [(None, ("3.11", "3.12"), True, "linux/amd64", 4)]


def test_native_is_one_archive_per_python_and_platform() -> None:
    shapes = _shapes(
        ("3.11", "3.12"),
        ("linux/amd64", "linux/arm64"),
        lambda py, p: _resolution(py, p, pure=False),
    )
    assert shapes == [
        ("3.11", ("3.11",), False, "linux/amd64", 1),
        ("3.11", ("3.11",), False, "linux/arm64", 1),
        ("3.12", ("3.12",), False, "linux/amd64", 1),
        ("3.12", ("3.12",), False, "linux/arm64", 1),
    ]


def test_pure_but_different_per_python_is_one_archive_per_python() -> None:
    # A backport that only older Pythons install: pure, but not the same everywhere.
    shapes = _shapes(
        ("3.10", "3.11"),
        ("linux/amd64", "linux/arm64"),
        lambda py, p: _resolution(py, p, pure=True, extra="-backport" if py == "3.10" else ""),
    )
    assert shapes == [
        ("3.10", ("3.10",), True, "linux/amd64", 2),
        ("3.11", ("3.11",), True, "linux/amd64", 2),
    ]


def test_one_python_keeps_the_old_names() -> None:
    shapes = _shapes(("3.12",), ("linux/amd64",), lambda py, p: _resolution(py, p, pure=False))
    assert shapes == [(None, ("3.12",), False, "linux/amd64", 1)]


def test_archive_names(tmp_path: Path) -> None:
    names = [
        archive_file(tmp_path, "app", "1.0", python, platform).name
        for python, platform in (
            (None, None),
            (None, "linux/arm64"),
            ("3.12", None),
            ("3.12", "windows/amd64"),
        )
    ]
    assert names == [
        "app-1.0.pyz",
        "app-1.0-linux_arm64.pyz",
        "app-1.0-py3.12.pyz",
        "app-1.0-py3.12-windows_amd64.pyz",
    ]


# --- the bootstrap's check of the interpreter ------------------------------------------

INFO = {"binary": "app", "version": "1.0", "platform": "any", "platforms": ["linux/amd64"]}


def test_an_archive_for_several_pythons_runs_on_each() -> None:
    info = {**INFO, "python": "3.11", "pythons": ["3.11", "3.12", "3.13"]}
    for minor in (11, 12, 13):
        boot.check_target(info, (3, minor), "linux", "x86_64")
    with pytest.raises(boot.BootError) as caught:
        boot.check_target(info, (3, 10), "linux", "x86_64")
    assert str(caught.value).startswith(
        "built for Python 3.11, 3.12, 3.13, but this is Python 3.10"
    )
    assert str(caught.value).endswith("run it with python3.11 or python3.12 or python3.13")


def test_a_per_python_archive_names_the_one_built_for_this_python() -> None:
    info = {
        **INFO,
        "python": "3.12",
        "pythons": ["3.12"],
        "built_pythons": ["3.11", "3.12"],
        "archive_python": "3.12",
        "platform": "linux/arm64",
        "platforms": ["linux/arm64"],
    }
    with pytest.raises(boot.BootError) as caught:
        boot.check_target(info, (3, 11), "linux", "aarch64")
    assert str(caught.value).endswith(
        "run it with python3.12, or use app-1.0-py3.11*.pyz, built for it"
    )
    with pytest.raises(boot.BootError) as other:  # a Python the build had no archive for
        boot.check_target(info, (3, 13), "linux", "aarch64")
    assert str(other.value).endswith("run it with python3.12")
    with pytest.raises(boot.BootError) as machine:
        boot.check_target(info, (3, 12), "linux", "x86_64")
    assert str(machine.value).endswith("use app-1.0-py3.12-linux_amd64.pyz")


def test_a_single_python_archive_reads_as_before() -> None:
    info = {**INFO, "python": "3.11"}
    boot.check_target(info, (3, 11), "linux", "x86_64")
    with pytest.raises(boot.BootError, match=r"this is Python 3\.12 .*; run it with python3\.11$"):
        boot.check_target(info, (3, 12), "linux", "x86_64")


# --- images: one per Python, as variants -----------------------------------------------


class PythonResolver(Resolver):
    """The variants tests' resolver, remembering the Python of each call."""

    def __init__(self) -> None:
        super().__init__()
        self.pythons: list[tuple[str, str]] = []

    def __call__(  # type: ignore[override]
        self, wheels: Any, platform: str, python: str, *args: Any, **kwargs: Any
    ) -> Resolution:
        self.pythons.append((python, platform))
        found = super().__call__(wheels, platform, python, *args, **kwargs)
        if python == "3.12":  # what only this Python installs, to tell the sites apart
            extra = Distribution("only312", "1.0", True)
            found = dataclasses.replace(found, distributions=(*found.distributions, extra))
        return found


def test_an_image_per_python_is_resolved_for_it_and_tagged_with_it(repo: Path) -> None:
    _layout_base(repo / "base-3.12", b"ID=python3.12\n")
    settings = ImageSettings(
        base="oci-layout:base",
        env=MappingProxyType({"LOG_LEVEL": "info"}),
        variants=MappingProxyType(
            {"python3.12": Variant("oci-layout:base-3.12", MappingProxyType({}), "3.12")}
        ),
    )
    plan = plan_variants(settings)
    assert [(f.base, f.python) for f in plan.flavours] == [
        ("oci-layout:base", ""),
        ("oci-layout:base-3.12", "3.12"),
    ]
    resolver = PythonResolver()
    action = dataclasses.replace(_action(repo), image=settings, pythons=("3.11", "3.12"))
    outputs = wrapped(ImageBuilder(resolver)).run(action, _ctx(repo), _deps(repo)).outputs
    assert sorted(resolver.pythons) == [
        ("3.11", "linux/amd64"),
        ("3.11", "linux/arm64"),
        ("3.12", "linux/amd64"),
        ("3.12", "linux/arm64"),
    ]
    images = {variant_of(a): a for a in select(outputs, kind="image")}
    assert sorted(images) == ["", "python3.12"]
    digests = {n: a.metadata.image.digest for n, a in images.items() if a.metadata.image}
    assert digests[""] != digests["python3.12"]
    # Each image lists what was installed for its own Python (the SBOM reads this).
    names = {n: {d.name for d in a.metadata.distributions()} for n, a in images.items()}
    assert "only312" in names["python3.12"] and "only312" not in names[""]
    archives = sorted(
        write_archive(repo / "dist", "app", platform, variant=variant)[0].name
        for variant in ("", "python3.12")
        for platform in ("linux/amd64", "linux/arm64")
    )
    assert archives == [
        "app-1.2.3-linux_amd64.tar",
        "app-1.2.3-linux_arm64.tar",
        "app-1.2.3-python3.12-linux_amd64.tar",
        "app-1.2.3-python3.12-linux_arm64.tar",
    ]
    assert variant_tags(["1.2.3", "latest"], "python3.12") == (
        "1.2.3-python3.12",
        "latest-python3.12",
    )
