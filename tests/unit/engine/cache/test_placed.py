"""The files a shared-cache client placed in this build: copied only while they still
hold their bytes, and one download per blob among restores running in parallel."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

from shipyard.artifacts import Artifact
from shipyard.engine.cache.placed import PlacedFiles


def _placed(path: Path, data: bytes) -> Artifact:
    path.write_bytes(data)
    return Artifact("wheel", "app", "any", path, hashlib.sha256(data).hexdigest(), len(data))


def test_a_placed_file_is_known_while_it_holds_its_bytes(tmp_path: Path) -> None:
    files = PlacedFiles()
    artifact = _placed(tmp_path / "a.whl", b"wheel")
    assert files.known(artifact.sha256, 5) is None
    files.remember([artifact])
    assert files.known(artifact.sha256, 5) == artifact.path
    assert files.known(artifact.sha256, 6) is None, "another size"
    artifact.path.write_bytes(b"WHEEL")
    assert files.known(artifact.sha256, 5) is None, "changed since"
    artifact.path.unlink()
    assert files.known(artifact.sha256, 5) is None


def test_a_second_restore_of_a_blob_waits_for_the_first_then_knows_its_file(
    tmp_path: Path,
) -> None:
    files = PlacedFiles()
    artifact = _placed(tmp_path / "a.whl", b"wheel")
    found: list[Path | None] = []
    with files.fetching(["b" * 64, artifact.sha256]):

        def second() -> None:
            with files.fetching([artifact.sha256]):
                found.append(files.known(artifact.sha256, 5))

        waiting = threading.Thread(target=second)
        waiting.start()
        time.sleep(0.3)
        assert found == [], "waits while the first holds the blob"
        files.remember([artifact])
    waiting.join(timeout=5)
    assert found == [artifact.path]
    with files.fetching([artifact.sha256]):  # known now: no lock is taken
        assert files.known(artifact.sha256, 5) == artifact.path
