"""Size budgets (engine/sizes.py) over real artifacts: a wheel, zipapps built by the
zipapp builder, and an OCI layout; the limits come from a real binaries.yaml."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from shipyard.artifacts import ANY, Artifact
from shipyard.builders.zipapp import ZipappBuilder, ZipappOptions
from shipyard.engine.plan import Action
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import Result
from shipyard.engine.sizes import SizeFinding, check_sizes, format_size, measure
from shipyard.errors import UsageError
from shipyard.manifest import Binary, load_manifest
from shipyard.oci.layer import BlobStore, Entry, write_layer
from shipyard.oci.layout import write_layout
from shipyard.oci.model import Config, Image, Platform, append_layer, make_index
from tests.unit.builders.test_resolve import make_wheel
from tests.unit.builders.zipapp.test_zipapp import _ctx, _wheel

PLATFORMS = ("linux/amd64", "linux/arm64")


def _binary(tmp_path: Path, size: str, outputs: str = "[wheel, zipapp, image]") -> Binary:
    """The binary `app` of a real manifest whose `size:` mapping is `size`."""
    (tmp_path / "app").mkdir(exist_ok=True)
    (tmp_path / "app" / "pyproject.toml").write_text('[project]\nname = "app"\nversion = "1"\n')
    (tmp_path / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: p, version: '1.0', python: '3.11'}\n"
        "binaries:\n  app:\n    source: app\n    entrypoint: 'app:main'\n"
        f"    outputs: {outputs}\n    size: {size}\n"
    )
    return load_manifest(tmp_path / "binaries.yaml", {}).binaries["app"]


def _result(kind: str, binaries: tuple[str, ...], *outputs: Artifact) -> Result:
    action = Action(f"{kind}:app", kind, binaries, Path("/src"))
    return Result(action, "built", 0.0, outputs=outputs)


def _file_artifact(kind: str, binary: str, platform: str, path: Path) -> Artifact:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return Artifact(kind, binary, platform, path, digest, path.stat().st_size)


def make_layout(layout: Path, platforms: tuple[str, ...]) -> None:
    """A real two-layer image per platform (gzip layers of incompressible bytes, a bigger
    one for each later platform), written as an OCI layout with an index."""
    store = BlobStore(layout.parent / "store")
    images = []
    for rank, platform in enumerate(platforms):
        image = Image(Platform.parse(platform), config=Config(user="1"))
        for n, size in enumerate((5_000, 20_000 * (rank + 1))):
            entry = Entry(f"data/{n}.bin", data=_noise(size + n))
            image = append_layer(image, write_layer([entry], store, 1_700_000_000))
        images.append(image)
    write_layout(layout, make_index(images), ref="1")


def _noise(size: int) -> bytes:
    return random.Random(size).randbytes(size)  # incompressible: the wheel is about this big


def _pulled(layout: Path) -> dict[str, int]:
    """Platform -> config plus layer sizes, read from the layout's JSON by hand."""

    def blob(digest: str) -> dict[str, object]:
        data = (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()
        loaded: dict[str, object] = json.loads(data)
        return loaded

    (root,) = json.loads((layout / "index.json").read_bytes())["manifests"]
    index = blob(root["digest"])
    sizes = {}
    for entry in index["manifests"]:  # type: ignore[attr-defined]
        manifest = blob(entry["digest"])
        layers = manifest["layers"]
        config = manifest["config"]
        assert isinstance(layers, list) and isinstance(config, dict)
        plat = entry["platform"]
        sizes[f"{plat['os']}/{plat['architecture']}"] = config["size"] + sum(
            layer["size"] for layer in layers
        )
    return sizes


def test_a_wheel_over_its_max_is_named_with_its_size_limit_and_key(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", "app", "1.0", files={"app/data.bin": _noise(30_000)})
    artifact = _file_artifact("wheel", "", "py3-none-any", wheel)
    binary = _binary(tmp_path, "{wheel: {max: 20kB}}")
    (finding,) = check_sizes([binary], [_result("wheel", ("app",), artifact)])
    assert finding == SizeFinding(
        "app", "wheel", "max", wheel.stat().st_size, 20_000, wheel, "py3-none-any"
    )
    size_kb = f"{wheel.stat().st_size / 1000:.1f} kB"
    assert finding.message(tmp_path) == (
        f"app wheel w/{wheel.name} is {size_kb}, over its size budget of 20 kB "
        "(binaries.app.size.wheel.max)"
    )
    # Within budget, nothing; a wheel that only feeds the zipapp is not checked.
    roomy = _binary(tmp_path, "{wheel: {max: 1MB}}")
    assert check_sizes([roomy], [_result("wheel", ("app",), artifact)]) == ()
    unshipped = _binary(tmp_path, "{wheel: {max: 1kB}}", outputs="[zipapp]")
    assert check_sizes([unshipped], [_result("wheel", ("app",), artifact)]) == ()
    # Another binary's wheel is not this one's.
    assert check_sizes([binary], [_result("wheel", ("other",), artifact)]) == ()


def test_a_real_zipapp_is_measured_per_archive_against_min_and_max(tmp_path: Path) -> None:
    ctx, wheel = _ctx(tmp_path), _wheel(tmp_path, "helper")
    builder = ZipappBuilder(lambda action: ZipappOptions("app:main"))
    action = Action("zipapp:app", "zipapp", ("app",), Path("/src"), PLATFORMS, ("wheel:app",))
    (pyz,) = wrapped(builder).run(action, ctx, (wheel,)).outputs
    assert (pyz.kind, pyz.platform, pyz.path.suffix) == ("zipapp", ANY, ".pyz")
    size = pyz.path.stat().st_size
    assert measure(pyz)[0].size == size
    results = [_result("zipapp", ("app",), pyz)]

    under = _binary(tmp_path, f"{{zipapp: {{min: {size + 1}B}}}}")
    (finding,) = check_sizes([under], results)
    assert (finding.bound, finding.size, finding.limit) == ("min", size, size + 1)
    assert finding.message(tmp_path) == (
        f"app zipapp dist/zipapps/{pyz.path.name} is {size} bytes, under its size budget of "
        f"{size + 1} bytes (binaries.app.size.zipapp.min)"
    )
    over = _binary(tmp_path, f"{{zipapp: {{max: {size - 1}B}}}}")
    assert [f.bound for f in check_sizes([over], results)] == ["max"]
    exact = _binary(tmp_path, f"{{zipapp: {{min: {size}B, max: {size}B}}}}")
    assert check_sizes([exact], results) == ()


def test_per_platform_zipapps_each_get_a_finding_with_their_platform(tmp_path: Path) -> None:
    ctx, wheel = _ctx(tmp_path), _wheel(tmp_path, "helper", "fast")
    builder = ZipappBuilder(lambda action: ZipappOptions("app:main", compress=False))
    action = Action("zipapp:app", "zipapp", ("app",), Path("/src"), ("linux/amd64",), ("w",))
    (pyz,) = wrapped(builder).run(action, ctx, (wheel,)).outputs
    binary = _binary(tmp_path, "{zipapp: {max: 1kB}}")
    (finding,) = check_sizes([binary], [_result("zipapp", ("app",), pyz)])
    assert finding.platform == "linux/amd64"
    assert f"dist/zipapps/{pyz.path.name} (linux/amd64) is " in finding.message(tmp_path)


def test_an_image_is_measured_per_platform_as_pulled(tmp_path: Path) -> None:
    layout = tmp_path / "dist" / "images" / "app"
    make_layout(layout, PLATFORMS)
    index = layout / "index.json"
    image = _file_artifact("image", "app", ANY, index)
    pulled = _pulled(layout)
    assert sorted(pulled) == sorted(PLATFORMS)
    assert {m.platform: m.size for m in measure(image)} == pulled
    assert all(m.path == layout for m in measure(image))
    # The index file itself is tiny: the budget is about what a pull downloads.
    assert index.stat().st_size < min(pulled.values())

    smallest = min(pulled.values())
    binary = _binary(tmp_path, f"{{image: {{max: {smallest - 1}B}}}}")
    findings = check_sizes([binary], [_result("image", ("app",), image)])
    assert sorted(f.platform for f in findings) == sorted(PLATFORMS)
    assert {f.size for f in findings} == set(pulled.values())
    assert "app image dist/images/app (linux/amd64) is " in findings[0].message(tmp_path)
    assert (
        check_sizes([_binary(tmp_path, "{image: {max: 1MB}}")], [_result("image", ("app",), image)])
        == ()
    )


def test_a_damaged_layout_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    layout = tmp_path / "images" / "app"
    make_layout(layout, PLATFORMS)
    index = layout / "index.json"
    image = _file_artifact("image", "app", ANY, index)
    (root,) = json.loads(index.read_bytes())["manifests"]
    (layout / "blobs" / "sha256" / root["digest"].removeprefix("sha256:")).write_bytes(b"{}")
    with pytest.raises(UsageError, match="rebuild the image"):
        measure(image)


@pytest.mark.parametrize(
    ("size", "like", "text"),
    [
        (40_000_000, None, "40 MB"),
        (41_234_567, 40_000_000, "41.2 MB"),
        (40 * 1024**2, None, "40 MiB"),
        (41 * 1024**2 + 300_000, 40 * 1024**2, "41.3 MiB"),
        (1536 * 1024**2, None, "1.5 GiB"),
        (2_500, None, "2.5 kB"),
        (999, None, "999 B"),
    ],
)
def test_sizes_read_in_the_units_of_their_limit(size: int, like: int | None, text: str) -> None:
    assert format_size(size, like=like) == text


def test_rounding_that_hides_the_breach_shows_bytes(tmp_path: Path) -> None:
    finding = SizeFinding("app", "zipapp", "max", 40_000_001, 40_000_000, tmp_path / "a.pyz", ANY)
    assert finding.message() == (
        f"app zipapp {tmp_path / 'a.pyz'} is 40000001 bytes, over its size budget of "
        "40000000 bytes (binaries.app.size.zipapp.max)"
    )


def test_the_message_reads_in_the_limits_unit(tmp_path: Path) -> None:
    pyz = tmp_path / "dist" / "zipapps" / "x.pyz"
    finding = SizeFinding("x", "zipapp", "max", 41_234_567, 40_000_000, pyz, ANY)
    assert finding.message(tmp_path) == (
        "x zipapp dist/zipapps/x.pyz is 41.2 MB, over its size budget of 40 MB "
        "(binaries.x.size.zipapp.max)"
    )
    small = SizeFinding("x", "image", "min", 900 * 1024, 1024**2, tmp_path, "linux/arm64")
    assert small.message() == (
        f"x image {tmp_path} (linux/arm64) is 0.9 MiB, under its size budget of 1 MiB "
        "(binaries.x.size.image.min)"
    )
