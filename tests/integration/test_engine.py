"""The engine on real builds: no-op rebuilds, incremental edits, kills, concurrent runs."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from shipyard._fs import TEMP_PREFIX
from tests.integration._repo import clone, copy_worktree, shipyard

pytestmark = pytest.mark.integration

# Wheels and zipapps: images need a base image, which the image tests cover.
SELECTION = ("--target=standard", "--output=wheel,zipapp")


def _outputs(dist: Path) -> dict[str, str]:
    return {
        str(p.relative_to(dist)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((dist / "wheels").glob("*"))
    }


def _statuses(root: Path) -> dict[str, str]:
    report = json.loads((root / "dist" / "report.json").read_text())
    return {a["id"]: a["status"] for a in report["actions"]}


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One commit of this working tree that every test clones (helpers may edit meanwhile)."""
    return copy_worktree(tmp_path_factory.mktemp("origin"))


@pytest.fixture(scope="module")
def reference(
    origin: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, str]]:
    """A checkout built once with its own cache: the outputs every other run must match."""
    root = clone(origin, tmp_path_factory.mktemp("ref") / "repo")
    cache = tmp_path_factory.mktemp("ref-cache")
    done = shipyard(root, "build", *SELECTION, f"--cache-dir={cache}")
    assert done.returncode == 0, done.stderr
    return root, _outputs(root / "dist")


def test_second_build_runs_nothing_and_an_edit_reruns_only_its_action(
    tmp_path: Path, origin: Path, reference: tuple[Path, dict[str, str]]
) -> None:
    root = clone(origin, tmp_path / "repo")
    cache = tmp_path / "cache"
    # The version carries the dirty flag, so start from a dirty tree: the edit
    # below must not flip it and rebuild everything for that reason.
    notes = root / "examples/mesh/echo/README.md"
    notes.write_text(notes.read_text() + "\nA local note.\n")
    assert shipyard(root, "build", *SELECTION, f"--cache-dir={cache}").returncode == 0
    again = shipyard(root, "build", *SELECTION, f"--cache-dir={cache}")
    assert again.returncode == 0, again.stderr
    assert set(_statuses(root).values()) == {"cached"}
    module = root / "examples/mesh/ctl/src/meshctl/cli.py"
    module.write_text(module.read_text() + "\n# an edit\n")
    edited = shipyard(root, "build", *SELECTION, f"--cache-dir={cache}")
    assert edited.returncode == 0, edited.stderr
    statuses = _statuses(root)
    rebuilt = sorted(a for a, s in statuses.items() if s == "built")
    assert rebuilt == ["wheel:examples/mesh/ctl", "zipapp:meshctl"]  # it and its dependents
    assert sum(s == "cached" for s in statuses.values()) == len(statuses) - 2


def _check_no_partial_outputs(root: Path, cache: Path, good: dict[str, str]) -> None:
    for path in (root / "dist").rglob("*"):
        temporary = any(part.startswith(TEMP_PREFIX) for part in path.parts)
        if path.is_file() and path.suffix == ".whl" and not temporary:
            with zipfile.ZipFile(path) as archive:
                assert archive.testzip() is None, path
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            assert good[str(path.relative_to(root / "dist"))] == digest, path
    for blob in (cache / "v1" / "blobs").glob("*"):
        if not blob.name.startswith(TEMP_PREFIX):
            assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name, blob
    for entry in (cache / "v1" / "actions").glob("*.json"):
        json.loads(entry.read_text())


def test_sigkill_at_random_moments_never_leaves_a_partial_output(
    tmp_path: Path, origin: Path, reference: tuple[Path, dict[str, str]]
) -> None:
    _, good = reference
    root = clone(origin, tmp_path / "repo")
    rng = random.Random(20261202)
    for trial in range(20):
        cache = tmp_path / f"cache-{trial % 4}"  # some trials resume a half-filled cache
        process = subprocess.Popen(
            [sys.executable, "-m", "shipyard", "build", *SELECTION, f"--cache-dir={cache}"],
            cwd=root,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "CI": "1"},
            start_new_session=True,
        )
        time.sleep(rng.uniform(0.2, 6.0))
        os.killpg(process.pid, signal.SIGKILL)  # the build and its PEP 517 children
        process.wait()
        _check_no_partial_outputs(root, cache, good)
    final = shipyard(root, "build", *SELECTION, f"--cache-dir={tmp_path / 'cache-0'}")
    assert final.returncode == 0, final.stderr
    assert _outputs(root / "dist") == good
    assert not [p for p in (root / "dist").rglob(f"{TEMP_PREFIX}*")]


def test_sigint_stops_cleanly(tmp_path: Path, origin: Path) -> None:
    root = clone(origin, tmp_path / "repo")
    process = subprocess.Popen(
        [sys.executable, "-m", "shipyard", "build", *SELECTION, "--no-cache"],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "CI": "1"},
    )
    time.sleep(2.0)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert not [p for p in (root / "dist").rglob(f"{TEMP_PREFIX}*")]


def test_two_builds_at_once_both_succeed_with_identical_outputs(
    tmp_path: Path, origin: Path, reference: tuple[Path, dict[str, str]]
) -> None:
    root = clone(origin, tmp_path / "repo")
    cache = tmp_path / "cache"
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "shipyard", "build", *SELECTION, f"--cache-dir={cache}"],
            cwd=root,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "CI": "1"},
        )
        for _ in range(2)
    ]
    for run in runs:
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
    assert _outputs(root / "dist") == reference[1]
