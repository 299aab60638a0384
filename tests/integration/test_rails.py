"""Publish rails against the real local registry: protected hubs (push and release) and
no-clobber for releases (preflight, and publish just before each tag moves).

Each test pushes under its own repository path. Releases use the real wheel builder
and the stand-in image builder of _release.py (small two-platform layouts); images
only, so no package index is involved.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path

import pytest

from shipyard.errors import UsageError
from shipyard.oci.remote.push import Publisher
from shipyard.oci.remote.registry import Registry
from shipyard.release import ReleaseOptions, prepare_release, release
from shipyard.release.pipeline import PIPELINE, run_pipeline
from shipyard.release.publish import Publish
from shipyard.release.rails import TagClobberError
from tests.integration._release import BUILDERS
from tests.integration.conftest import Services
from tests.integration.test_push import make_layout
from tests.tiny import OFFLINE
from tests.tiny import make_repo as make_tiny

pytestmark = [pytest.mark.integration, pytest.mark.requires("registry")]

PLATFORMS = ("linux/amd64", "linux/arm64")


def _prefix(name: str) -> str:
    return f"rails-{name}-{uuid.uuid4().hex[:8]}"


def _repo(tmp_path: Path, image: str) -> Path:
    """A committed one-binary repository (`app`, outputs [image]) whose image mapping is
    `image` (flow YAML)."""
    root = make_tiny(tmp_path / "repo", {})
    # The binary's wheel carries the release's version (release validate checks it).
    (root / "tiny" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        '[project]\nname = "tiny"\ndynamic = ["version"]\n'
        '[tool.hatch.version]\nsource = "code"\npath = "version_stamp.py"\n'
        '[tool.hatch.build.targets.wheel]\npackages = ["tiny"]\n'
    )
    (root / "tiny" / "version_stamp.py").write_text(
        'import os\n__version__ = os.environ.get("SHIPYARD_VERSION", "0.0.0")\n'
    )
    (root / "binaries.yaml").write_text(
        "schema: 1\n"
        'project: {name: tiny, version: "1.0.0", python: "3.11"}\n'
        "binaries:\n"
        "  app:\n"
        "    source: tiny\n"
        '    entrypoint: "tiny:main"\n'
        "    outputs: [image]\n"
        f"    platforms: [{', '.join(PLATFORMS)}]\n"
        f"    image: {image}\n"
    )
    git = ["git", "-C", str(root), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "rails"], check=True)
    return root


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return {**env, **OFFLINE, **extra}


def _cli(root: Path, *args: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shipyard", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        env={**env, "SHIPYARD_CACHE_DIR": str(root.parent / "cache")},
        check=False,
    )


def _tag(registry: str, repo: str, tag: str) -> str | None:
    return Registry(registry).manifest_exists(repo, tag)


def _push_other(registry: str, prefix: str, tags: list[str], tmp_path: Path) -> str:
    """Another image (not this release's) pushed to `<prefix>/app` under `tags`; its digest."""
    layout = tmp_path / "other"
    digest = make_layout(layout, PLATFORMS, f"someone-else-{prefix}")
    Publisher().push("app", layout, [f"{registry}/{prefix}"], tags)
    return digest


def test_push_to_a_protected_hub_needs_ci_or_force(services: Services, tmp_path: Path) -> None:
    open_prefix, prod_prefix = _prefix("open"), _prefix("prod")
    open_hub, prod_hub = f"{services.registry}/{open_prefix}", f"{services.registry}/{prod_prefix}"
    root = _repo(tmp_path, f"{{hubs: [{open_hub}, {prod_hub}], protected: [{prod_hub}]}}")
    make_layout(root / "dist" / "images" / "app", PLATFORMS, "app@1")

    refused = _cli(root, "push", "--tag=t1", env=_env(CI=""))
    assert refused.returncode == 2, refused.stderr
    assert f"app -> {prod_hub}: protected hub (image.protected)" in refused.stderr
    assert "--force-protected" in refused.stderr and "Traceback" not in refused.stderr
    # Refused before anything was pushed: not even to the open hub.
    assert _tag(services.registry, f"{open_prefix}/app", "t1") is None
    assert _tag(services.registry, f"{prod_prefix}/app", "t1") is None

    in_ci = _cli(root, "push", "--tag=t2", env=_env(CI="1"))
    assert in_ci.returncode == 0, in_ci.stderr
    pushed = _tag(services.registry, f"{prod_prefix}/app", "t2")
    assert pushed is not None and pushed == _tag(services.registry, f"{open_prefix}/app", "t2")

    forced = _cli(root, "push", "--tag=t3", "--force-protected", env=_env())
    assert forced.returncode == 0, forced.stderr
    assert _tag(services.registry, f"{prod_prefix}/app", "t3") == pushed


def test_a_release_to_a_protected_hub_stops_in_preflight_outside_ci(
    services: Services, tmp_path: Path
) -> None:
    prefix = _prefix("rel-prod")
    hub = f"{services.registry}/{prefix}"
    root = _repo(tmp_path, f"{{hubs: [{hub}], protected: [{hub}], tags: [latest]}}")

    refused = _cli(root, "release", "--version=1.0.0", env=_env())
    assert refused.returncode == 2, refused.stderr
    assert f"app -> {hub}: protected hub" in refused.stderr
    assert "`shipyard release`" in refused.stderr
    assert "preflight  failed" in refused.stderr and "build      skipped" in refused.stderr
    assert not (root / "dist" / "report.json").exists(), "nothing may be built"
    assert not (root / "dist" / "release").exists()

    # A dry run publishes nothing: it says what a real release would refuse, and goes on.
    lines: list[str] = []
    ctx = prepare_release(
        root / "binaries.yaml",
        ReleaseOptions(version="1.0.0", dry_run=True),
        env=_env(),
        builders=BUILDERS,
        on_step=lines.append,
    )
    run_pipeline(ctx, PIPELINE[:1])
    assert any(f"app -> {hub} is a protected hub" in line for line in lines)

    for extra, options in (
        ({"CI": "true"}, ReleaseOptions(version="1.0.0")),
        ({}, ReleaseOptions(version="1.0.1", force_protected=True)),
    ):
        ctx = prepare_release(root / "binaries.yaml", options, env=_env(**extra), builders=BUILDERS)
        release(ctx)
        assert ctx.staged is not None
        (image,) = ctx.staged.images
        assert _tag(services.registry, f"{prefix}/app", options.version or "") == image.digest
        assert _tag(services.registry, f"{prefix}/app", "latest") == image.digest


def test_no_clobber_stops_a_release_whose_version_tag_names_another_image(
    services: Services, tmp_path: Path
) -> None:
    prefix = _prefix("clobber")
    hub = f"{services.registry}/{prefix}"
    root = _repo(tmp_path, f"{{hubs: [{hub}], tags: [latest]}}")
    other = _push_other(services.registry, prefix, ["2.0.0", "latest"], tmp_path)

    refused = _cli(root, "release", "--version=2.0.0", env=_env())
    assert refused.returncode == 2, refused.stderr
    assert f"{hub}/app:2.0.0 is {other}" in refused.stderr
    assert "(no-clobber); nothing was built" in refused.stderr and "--clobber" in refused.stderr
    assert "latest" not in refused.stderr.partition("no-clobber")[0], "latest may move"
    assert not (root / "dist" / "report.json").exists(), "nothing may be built"
    assert not (root / "dist" / "release").exists()
    assert _tag(services.registry, f"{prefix}/app", "2.0.0") == other

    # --clobber: preflight lets it through (saying what will move), and the release
    # moves the version tag and latest to the new image.
    lines: list[str] = []
    ctx = prepare_release(
        root / "binaries.yaml",
        ReleaseOptions(version="2.0.0", clobber=True),
        env=_env(),
        builders=BUILDERS,
        on_step=lines.append,
    )
    release(ctx)
    assert f"--clobber: {hub}/app:2.0.0 ({other}) will move" in lines
    assert ctx.staged is not None
    (image,) = ctx.staged.images
    assert image.digest != other
    assert _tag(services.registry, f"{prefix}/app", "2.0.0") == image.digest
    assert _tag(services.registry, f"{prefix}/app", "latest") == image.digest


def test_latest_moves_but_a_fixed_tag_does_not(services: Services, tmp_path: Path) -> None:
    prefix = _prefix("latest")
    hub = f"{services.registry}/{prefix}"
    root = _repo(tmp_path, f"{{hubs: [{hub}], tags: [latest, stable]}}")
    other = _push_other(services.registry, prefix, ["latest"], tmp_path)

    ctx = prepare_release(
        root / "binaries.yaml", ReleaseOptions(version="3.0.0"), env=_env(), builders=BUILDERS
    )
    release(ctx)
    assert ctx.staged is not None
    (image,) = ctx.staged.images
    for tag in ("3.0.0", "latest", "stable"):
        assert _tag(services.registry, f"{prefix}/app", tag) == image.digest, tag
    assert image.digest != other

    # `stable` now names 3.0.0's image and is not movable: 3.0.1 stops in preflight.
    ctx = prepare_release(
        root / "binaries.yaml", ReleaseOptions(version="3.0.1"), env=_env(), builders=BUILDERS
    )
    with pytest.raises(UsageError) as caught:
        release(ctx)
    assert caught.value.exit_code == 2
    assert f"{hub}/app:stable is {image.digest}" in str(caught.value)
    assert "image.movable_tags" in str(caught.value)
    assert [(r.name, r.status) for r in ctx.results][:2] == [
        ("preflight", "failed"),
        ("build", "skipped"),
    ]


def test_publish_checks_each_tag_again_just_before_it_moves(
    services: Services, tmp_path: Path
) -> None:
    prefix = _prefix("race")
    root = _repo(tmp_path, f"{{hubs: [{services.registry}/{prefix}], tags: [stable, latest]}}")
    ctx = prepare_release(
        root / "binaries.yaml", ReleaseOptions(version="4.0.0"), env=_env(), builders=BUILDERS
    )
    run_pipeline(ctx, PIPELINE[:4])  # preflight found no tag; build, validate, stage
    # Someone else tags `stable` between preflight and publish.
    other = _push_other(services.registry, prefix, ["stable"], tmp_path)
    with pytest.raises(TagClobberError) as caught:
        run_pipeline(ctx, (Publish(),))
    assert caught.value.exit_code == 1
    assert f"{prefix}/app:stable now points at {other}" in str(caught.value)
    assert _tag(services.registry, f"{prefix}/app", "stable") == other, "left as it is"


def test_a_variant_s_tags_are_checked_and_its_suffixed_movable_tags_may_move(
    services: Services, tmp_path: Path
) -> None:
    from shipyard.manifest import load_manifest
    from shipyard.oci.remote.push import variant_tags
    from shipyard.release.rails import find_clashes

    prefix = _prefix("variant")
    hub = f"{services.registry}/{prefix}"
    root = _repo(
        tmp_path,
        f"{{hubs: [{hub}], tags: [latest], variants: {{debug: {{env: {{DEBUG: '1'}}}}}}}}",
    )
    other = _push_other(
        services.registry, prefix, ["1.0.0-debug", "latest-debug", "1.0.0"], tmp_path
    )
    binary = load_manifest(root / "binaries.yaml").binaries["app"]
    client = Registry(services.registry)

    debug = find_clashes(
        client, binary, hub, variant_tags(("1.0.0", "latest"), "debug"), variant="debug"
    )
    # latest-debug is latest suffixed: movable; the variant's version tag is not.
    assert [(c.tag, c.digest) for c in debug] == [("1.0.0-debug", other)]
    # Without the variant, latest-debug is just another tag: not movable.
    plain = find_clashes(client, binary, hub, ("latest-debug",))
    assert [c.tag for c in plain] == ["latest-debug"]

    # A release checks the variant's tags in preflight, before anything is built.
    ctx = prepare_release(
        root / "binaries.yaml",
        ReleaseOptions(version="1.0.0"),
        env=_env(),
        builders=BUILDERS,
    )
    with pytest.raises(UsageError) as caught:
        run_pipeline(ctx, PIPELINE[:1])
    assert f"{services.registry}/{prefix}/app:1.0.0-debug is {other}" in str(caught.value)
    assert "latest-debug" not in str(caught.value)
