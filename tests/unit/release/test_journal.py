"""publish.journal: durable appends, torn lines from a kill, resume decisions."""

from __future__ import annotations

import json
from pathlib import Path

from shipyard.release import Journal
from shipyard.release.publish import publish_steps
from shipyard.release.staged import parse_release


def test_records_survive_a_new_reader(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "publish.journal")
    journal.record("image h/a@sha256:1", digest="sha256:1")
    journal.record("wheel a-1-py3-none-any.whl", sha256="ff")
    again = Journal(tmp_path / "publish.journal")
    assert again.steps == ("image h/a@sha256:1", "wheel a-1-py3-none-any.whl")
    assert again.done("wheel a-1-py3-none-any.whl")
    assert not again.done("wheel b-1-py3-none-any.whl")
    assert again.get("image h/a@sha256:1") == {"step": "image h/a@sha256:1", "digest": "sha256:1"}


def test_a_torn_last_line_is_ignored_and_the_next_record_is_whole(tmp_path: Path) -> None:
    path = tmp_path / "publish.journal"
    path.write_bytes(b'{"step":"one"}\n{"step":"tw')  # killed mid-write
    journal = Journal(path)
    assert journal.steps == ("one",)
    journal.record("two")
    lines = path.read_bytes().splitlines()
    assert json.loads(lines[-1]) == {"step": "two"}
    assert Journal(path).steps == ("one", "two")


def test_missing_journal_means_nothing_done(tmp_path: Path) -> None:
    assert Journal(tmp_path / "none").steps == ()


def test_publish_steps_upload_everything_then_move_every_tag() -> None:
    image = {"kind": "image", "digest": "sha256:d", "hubs": ["h1/x", "h2/y"]}
    staged = {
        "artifacts": [
            {"kind": "wheel", "path": "wheels/a-1-py3-none-any.whl"},
            {**image, "binary": "a", "tags": ["1", "latest"]},
            {**image, "binary": "b", "tags": ["1"]},
            {"kind": "sbom", "path": "sbom/a.cdx.json"},
        ]
    }
    assert publish_steps(parse_release(staged)) == [
        "image h1/x/a@sha256:d",
        "image h2/y/a@sha256:d",
        "image h1/x/b@sha256:d",
        "image h2/y/b@sha256:d",
        "wheel a-1-py3-none-any.whl",
        # Tags last: the version tag on every hub, then the floating ones.
        "tag h1/x/a:1@sha256:d",
        "tag h2/y/a:1@sha256:d",
        "tag h1/x/b:1@sha256:d",
        "tag h2/y/b:1@sha256:d",
        "tag h1/x/a:latest@sha256:d",
        "tag h2/y/a:latest@sha256:d",
    ]


def test_a_signed_release_signs_and_attests_each_image_before_wheels_and_tags() -> None:
    image = {"kind": "image", "digest": "sha256:d", "hubs": ["h1/x"], "binary": "a"}
    staged = {
        "artifacts": [
            {"kind": "wheel", "path": "wheels/a-1-py3-none-any.whl"},
            {**image, "tags": ["1"]},
        ]
    }
    assert publish_steps(parse_release(staged), signed=True) == [
        "image h1/x/a@sha256:d",
        "sign h1/x/a@sha256:d",
        "attest h1/x/a@sha256:d",
        "wheel a-1-py3-none-any.whl",
        "tag h1/x/a:1@sha256:d",
    ]


def test_resume_runs_only_the_steps_not_journalled(tmp_path: Path) -> None:
    staged = {
        "artifacts": [
            {
                "kind": "image",
                "binary": "a",
                "digest": "sha256:d",
                "hubs": ["h1/x", "h2/y"],
                "tags": ["1"],
            },
            {"kind": "wheel", "path": "wheels/a-1-py3-none-any.whl"},
        ]
    }
    journal = Journal(tmp_path / "publish.journal")
    journal.record("image h1/x/a@sha256:d")
    todo = [s for s in publish_steps(parse_release(staged)) if not journal.done(s)]
    assert todo == [
        "image h2/y/a@sha256:d",
        "wheel a-1-py3-none-any.whl",
        "tag h1/x/a:1@sha256:d",
        "tag h2/y/a:1@sha256:d",
    ]
