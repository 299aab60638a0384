"""Publish rails (release/rails.py) without a registry: protected hubs, the CI switch,
the journal's record of what a release pushed, and the no-clobber messages. The
registry side is in tests/integration/test_rails.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from shipyard.errors import UsageError
from shipyard.manifest import Manifest, load_manifest
from shipyard.release.journal import Journal
from shipyard.release.publish import publish_steps
from shipyard.release.rails import (
    ProtectedHub,
    TagClash,
    check_protected,
    clash_error,
    is_ci,
    journal_digests,
    refused_hubs,
)
from shipyard.release.staged import parse_release

PROD, STAGING = "127.0.0.1:5000/prod", "127.0.0.1:5000/staging"


def _manifest(tmp_path: Path) -> Manifest:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "pyproject.toml").write_text('[project]\nname = "app"\nversion = "1"\n')
    (tmp_path / "binaries.yaml").write_text(
        "schema: 1\nproject: {name: p, version: '1.0', python: '3.11'}\n"
        f"defaults:\n  outputs: [image]\n  image: {{hubs: [{STAGING}, {PROD}]}}\n"
        "binaries:\n"
        f"  app: {{source: app, entrypoint: 'app:main', image: {{protected: [{PROD}]}}}}\n"
        "  open: {source: app, entrypoint: 'app:main'}\n"
        f"  tagged: {{source: app, entrypoint: 'app:main', image: {{movable_tags: [edge]}}}}\n"
    )
    return load_manifest(tmp_path / "binaries.yaml", {})


@pytest.mark.parametrize(
    ("env", "ci"),
    [
        ({}, False),
        ({"CI": ""}, False),
        ({"CI": " "}, False),
        ({"CI": "1"}, True),
        ({"CI": "true"}, True),
    ],
)
def test_ci_means_the_variable_is_set_to_something(env: dict[str, str], ci: bool) -> None:
    assert is_ci(env) is ci


def test_protected_hubs_are_refused_outside_ci_unless_forced(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path)
    binaries = list(manifest.binaries.values())
    assert manifest.binaries["app"].image.movable_tags == ("latest",)
    assert manifest.binaries["tagged"].image.movable_tags == ("edge",)
    assert refused_hubs(binaries, {}, force=False) == (ProtectedHub("app", PROD),)
    assert refused_hubs(binaries, {"CI": "1"}, force=False) == ()
    assert refused_hubs(binaries, {}, force=True) == ()
    with pytest.raises(UsageError) as caught:
        check_protected(binaries, {"CI": ""}, force=False, command="push")
    assert caught.value.exit_code == 2
    text = str(caught.value)
    assert text.startswith(f"app -> {PROD}: protected hub (image.protected)")
    assert "nothing was pushed" in text and "--force-protected to `shipyard push`" in text
    assert STAGING not in text
    check_protected(binaries, {"CI": "yes"}, force=False, command="push")
    check_protected(binaries, {}, force=True, command="release")


def test_the_journal_names_the_digests_a_release_pushed_per_hub_and_binary(
    tmp_path: Path,
) -> None:
    # The step names come from publish itself, so a rename there fails here.
    staged = {
        "artifacts": [
            {
                "kind": "image",
                "binary": "app",
                "digest": "sha256:aa",
                "hubs": [PROD, STAGING],
                "tags": ["1.0.0", "latest"],
            },
            {
                "kind": "image",
                "binary": "app-x",
                "digest": "sha256:bb",
                "hubs": [PROD],
                "tags": ["1.0.0"],
            },
        ]
    }
    steps = publish_steps(parse_release(staged))
    journal = Journal(tmp_path / "publish.journal")
    assert journal_digests(journal, PROD, "app") == frozenset()
    upload = next(s for s in steps if s.startswith("image") and PROD in s and "/app@" in s)
    journal.record(upload, digest="sha256:aa")
    other = next(s for s in steps if "app-x" in s)
    journal.record(other, digest="sha256:bb")
    assert journal_digests(Journal(journal.path), PROD, "app") == {"sha256:aa"}
    assert journal_digests(journal, STAGING, "app") == frozenset()
    assert journal_digests(journal, PROD, "app-x") == {"sha256:bb"}
    tag = next(s for s in steps if s.startswith("tag") and STAGING in s and ":latest@" in s)
    journal.record(tag, digest="sha256:aa")
    assert journal_digests(journal, STAGING, "app") == {"sha256:aa"}
    assert journal_digests(None, PROD, "app") == frozenset()


def test_clash_messages_name_each_tag_its_digest_and_the_fix() -> None:
    version = TagClash("app", PROD, "127.0.0.1:5000/prod/app:1.0.0", "1.0.0", "sha256:cc")
    stable = TagClash("app", PROD, "127.0.0.1:5000/prod/app:stable", "stable", "sha256:dd")
    error = clash_error([version, stable], "1.0.0")
    assert error.exit_code == 2
    assert str(error).startswith(
        "127.0.0.1:5000/prod/app:1.0.0 is sha256:cc; 127.0.0.1:5000/prod/app:stable is "
        "sha256:dd: the version is already released (no-clobber); nothing was built."
    )
    assert "choose a new version, or pass --clobber" in str(error)
    only = str(clash_error([stable], "1.0.0"))
    assert "image.movable_tags" in only and "--clobber" in only and "already released" not in only
