"""release/publishers.py: one list of publishers, one runner (journal, dry run, already
there, log). Publish and promote against real registries run in the integration tests
(test_release*.py, test_promote*.py); here the runner's decisions and the order."""

from __future__ import annotations

from pathlib import Path

from shipyard.errors import ShipyardError
from shipyard.oci.remote.push import Publisher
from shipyard.release.journal import Journal
from shipyard.release.publishers import (
    PUBLISHERS,
    Job,
    Placement,
    Runner,
    Step,
    publish_all,
    step_keys,
    tag_order,
)
from shipyard.release.staged import StagedFile, StagedRelease, parse_release

D = "sha256:" + "d" * 64


class _Source:
    """Records what the images publisher asks of the source."""

    def __init__(self) -> None:
        self.pushed: list[str] = []

    def would(self, place: Placement) -> str:
        return f"would send {place.where()}"

    def push(self, place: Placement) -> None:
        self.pushed.append(place.where())

    def root(self, place: Placement) -> tuple[str, str, bytes]:
        return place.image.digest, "application/vnd.oci.image.index.v1+json", b"{}"


def _release(hubs: list[str]) -> StagedRelease:
    image = {
        "kind": "image",
        "binary": "app",
        "path": "images/app",
        "digest": D,
        "hubs": hubs,
        "tags": ["1.0", "latest"],
    }
    wheel = {"kind": "wheel", "path": "wheels/app-1.0-py3-none-any.whl", "sha256": "ab" * 32}
    return parse_release({"version": "1.0", "artifacts": [image, wheel]})


def _job(release: StagedRelease, source: _Source, *, signed: bool = False) -> Job:
    places = tuple(Placement(i, hub) for i in release.images for hub in i.hubs)
    return Job(
        release,
        Path("/nonexistent"),
        places,
        source,
        Publisher(),
        None,
        None,
        (b"",) if signed else (),
        False,
        lambda _: None,
        ShipyardError,
        signed=signed,
    )


def test_the_list_is_images_sboms_signatures_wheels_then_tags() -> None:
    assert [p.__name__ for p in PUBLISHERS] == ["images", "sboms", "signatures", "wheels", "tags"]
    job = _job(_release(["127.0.0.1:5000/a", "127.0.0.1:5000/b"]), _Source(), signed=True)
    keys = step_keys(job)
    assert [k.split()[0] for k in keys] == [
        "image", "image", "sign", "attest", "sign", "attest", "wheel", "tag", "tag", "tag", "tag"
    ]  # fmt: skip
    # The version tag on every hub before any other tag moves.
    assert [t for _, t in tag_order(job.places)] == ["1.0", "1.0", "latest", "latest"]


def _step(log: list[str], key: str = "s", *, present: bool | None = None) -> Step:
    return Step(
        key,
        lambda: f"would {key}",
        lambda: log.append(f"did {key}"),
        None if present is None else (lambda: present),
        {"digest": D},
    )


def test_the_runner_journals_a_step_it_did_and_skips_it_when_present(tmp_path: Path) -> None:
    log: list[str] = []
    journal = Journal(tmp_path / "journal")
    runner = Runner(journal, False, log.append)
    runner.run(_step(log, present=True))
    assert log == ["did s"] and journal.done("s")
    assert journal.get("s") == {"step": "s", "digest": D}
    runner.run(_step(log, present=True))
    assert log == ["did s", "journalled s"]


def test_a_journalled_step_missing_at_the_registry_is_done_again(tmp_path: Path) -> None:
    """The journal is outside SHA256SUMS: a line it holds is a hint, never proof."""
    log: list[str] = []
    journal = Journal(tmp_path / "journal")
    journal.record("s", digest=D)
    Runner(journal, False, log.append).run(_step(log, present=False))
    assert log == ["journalled s, but not at the registry: doing it again", "did s"]


def test_a_dry_run_says_each_step_and_does_nothing(tmp_path: Path) -> None:
    log: list[str] = []
    journal = Journal(tmp_path / "journal")
    Runner(journal, True, log.append).run(_step(log, present=False))
    assert log == ["would s"] and not journal.done("s")


def test_without_a_journal_every_step_runs_and_checks_for_itself() -> None:
    """Promote has no journal: each step runs, each checks what is there before it writes."""
    log: list[str] = []
    runner = Runner(None, False, log.append)
    runner.run(_step(log, present=True))
    runner.run(_step(log, present=True))
    assert log == ["did s", "did s"]


def test_a_dry_run_of_the_whole_list_pushes_nothing() -> None:
    source = _Source()
    lines: list[str] = []
    job = _job(_release(["127.0.0.1:5000/a"]), source)
    job.on_step = lines.append
    publish_all(job, Runner(None, True, lines.append))
    assert source.pushed == []
    assert lines == [
        "would send 127.0.0.1:5000/a/app",
        "would stage wheel app-1.0-py3-none-any.whl but not upload it: no package index is "
        "set (SHIPYARD_INDEX_URL or --index-url)",
        f"would tag 127.0.0.1:5000/a/app:1.0 -> {D}",
        f"would tag 127.0.0.1:5000/a/app:latest -> {D}",
    ]
    assert isinstance(job.release.wheels[0], StagedFile)
