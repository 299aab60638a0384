"""The README's release promises (issue 18, items 5 and 6), stage by stage:
dist/release/<version> must be free for a snapshot too, a staged folder is replaced
whole, a file that was not staged is refused before publishing, and a dry run with
no package index says each wheel is staged but not uploaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from shipyard.errors import UsageError
from shipyard.oci.remote.registry import Registry
from shipyard.release import ReleaseOptions
from shipyard.release.preflight import Preflight
from shipyard.release.publish import Publish, verify_staged
from shipyard.release.staged import SUMS, parse_release
from shipyard.release.staging import StageRelease, sha256sums
from tests.unit.release.test_pipeline import make_context
from tests.unit.release.test_publish import publishing_context, stage


def test_a_snapshot_into_an_existing_folder_stops_in_preflight(tmp_path: Path) -> None:
    ctx = make_context(tmp_path, ReleaseOptions(snapshot=True))
    ctx.release_dir.mkdir(parents=True)
    with pytest.raises(UsageError) as caught:
        Preflight().run(ctx)
    assert caught.value.exit_code == 2
    assert str(ctx.release_dir) in str(caught.value)
    assert "--clean" in str(caught.value)
    Preflight().run(make_context(tmp_path, ReleaseOptions(snapshot=True, clean=True)))


def test_a_dry_run_restages_its_own_scratch_folder(tmp_path: Path) -> None:
    ctx = make_context(tmp_path, ReleaseOptions(snapshot=True, dry_run=True))
    ctx.release_dir.mkdir(parents=True)
    Preflight().run(ctx)  # <version>.dry-run is scratch, replaced on every dry run


def test_staging_replaces_the_folder_whole(tmp_path: Path) -> None:
    ctx = make_context(tmp_path, ReleaseOptions(snapshot=True, clean=True))
    folder = ctx.release_dir
    (folder / "wheels").mkdir(parents=True)
    (folder / "stray.txt").write_text("left over\n")
    (folder / "wheels" / "stray-0.1-py3-none-any.whl").write_bytes(b"not staged")
    (folder / "publish.journal").write_text('{"step":"release"}\n')
    StageRelease().run(ctx)
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert files == ["CHANGELOG.md", "SHA256SUMS", "release.json"]
    assert (folder / SUMS).read_text() == sha256sums(folder)
    assert not any(p.name.startswith(".tmp") for p in folder.parent.iterdir())


def test_a_file_that_was_not_staged_is_refused_by_name(tmp_path: Path) -> None:
    ctx = publishing_context(tmp_path, ReleaseOptions(version="1.2.3"))
    folder = ctx.release_dir
    stage(folder)
    (folder / SUMS).write_text(sha256sums(folder))
    (folder / "publish.journal").write_text("")
    verify_staged(ctx)  # the sums and the journal are not listed, and belong
    stray = folder / "images" / "demo" / "blobs" / "sha256" / "extra"
    stray.write_bytes(b"dropped in after staging")
    with pytest.raises(UsageError) as caught:
        verify_staged(ctx)
    assert caught.value.exit_code == 2
    assert str(stray) in str(caught.value)
    assert "--clean" in str(caught.value)


def test_publish_refuses_a_stray_file_before_contacting_anything(tmp_path: Path) -> None:
    def registry_for(host: str) -> Registry:
        raise AssertionError(f"{host} was contacted")

    ctx = publishing_context(tmp_path, ReleaseOptions(version="1.2.3"))
    ctx.registry_for = registry_for
    folder = ctx.release_dir
    ctx.staged = parse_release(stage(folder))
    (folder / SUMS).write_text(sha256sums(folder))
    (folder / "notes.txt").write_text("not staged\n")
    with pytest.raises(UsageError, match=r"notes\.txt is in the release but not in SHA256SUMS"):
        Publish().run(ctx)
    assert not (folder / "publish.journal").exists()


def test_a_dry_run_without_an_index_says_wheels_are_staged_not_uploaded(
    tmp_path: Path,
) -> None:
    lines: list[str] = []
    ctx = publishing_context(tmp_path, ReleaseOptions(version="1.2.3", dry_run=True))
    ctx.on_step = lines.append
    assert ctx.index is None
    folder = ctx.release_dir
    ctx.staged = parse_release(stage(folder))
    (folder / SUMS).write_text(sha256sums(folder))
    Publish().run(ctx)
    wheel = "wheel demo-1.0.0-py3-none-any.whl"
    assert f"would stage {wheel} but not upload it: no package index is set" in "\n".join(lines)
    summary = [line for line in lines if "would not be uploaded" in line]
    assert len(summary) == 1 and "SHIPYARD_INDEX_URL or --index-url" in summary[0]
    assert sum(line.startswith("would push image") for line in lines) == 1
    assert not (folder / "publish.journal").exists()
