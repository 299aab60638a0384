"""Files a release copies from the checkout follow the rules of sources, through the CLI
(issue: security, item 3): a committed `LICENSE -> /proc/self/environ` put the
environment of `shipyard release --snapshot` (its secrets) into the per-platform release
archives; it must stop the release in preflight with exit 2 naming LICENSE, and nothing
under dist/ may hold the secret. A license linked inside the repository still ships.
No hub, no index: wheels and zipapps only.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.integration._release import make_repo
from tests.reliability import record

pytestmark = [pytest.mark.integration]

MANIFEST = """\
schema: 1
project: {name: mesh, version: git, python: "3.11"}
defaults:
  outputs: [wheel, zipapp]
  platforms: [linux/amd64]
binaries:
  meshctl: {source: ctl, entrypoint: "meshctl.cli:main"}
"""
SECRET = "release-token-4f0c9e2d"


def shipyard(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m shipyard ARGS` in `repo`, with a secret in its environment as CI has."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIPYARD_INDEX_")}
    env.update(CI="1", SHIPYARD_CACHE_DIR=str(repo.parent / "cache"), RELEASE_TOKEN=SECRET)
    return subprocess.run(
        [sys.executable, "-m", "shipyard", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def commit_license(repo: Path, target: str) -> None:
    """Commit a LICENSE that is a symlink to `target`."""
    (repo / "LICENSE").symlink_to(target)
    git = ["git", "-C", str(repo), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "add", "LICENSE"], check=True)
    subprocess.run([*git, "commit", "-qm", "license"], check=True)


def contents(path: Path) -> list[tuple[str, bytes]]:
    """`path`'s bytes, and those of every member when it is an archive (tar.gz, zip,
    zipapp, wheel): where a secret could hide under dist/."""
    data = path.read_bytes()
    found = [(str(path), data)]
    if path.name.endswith((".tar.gz", ".tgz")):
        found.append((f"{path} (gunzipped)", gzip.decompress(data)))
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                handle = tar.extractfile(member)
                if handle is not None:
                    found.append((f"{path}!{member.name}", handle.read()))
    elif zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            found += [(f"{path}!{n}", archive.read(n)) for n in archive.namelist()]
    return found


def holding(folder: Path, secret: str) -> list[str]:
    """Every file (or archive member) under `folder` that holds `secret`."""
    if not folder.exists():
        return []
    return [
        where
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.is_symlink()
        for where, data in contents(path)
        if secret.encode() in data
    ]


@pytest.mark.reliability
@pytest.mark.skipif(not os.path.isfile("/proc/self/environ"), reason="no /proc here")
def test_a_license_linked_to_the_environment_stops_the_snapshot_in_preflight(
    tmp_path: Path,
) -> None:
    """Regression: the snapshot succeeded and meshctl-<version>-linux-amd64.tar.gz held
    a LICENSE with the release's environment, RELEASE_TOKEN among it."""
    repo = make_repo(tmp_path / "repo", MANIFEST)
    commit_license(repo, "/proc/self/environ")
    done = shipyard(repo, "release", "--snapshot")
    leaks = holding(repo / "dist", SECRET)
    assert not leaks, f"the secret is in: {leaks}"
    assert done.returncode == 2, done.stderr
    assert f"{repo / 'LICENSE'}: a symlink to '/proc/self/environ' leaves the repository" in (
        done.stderr
    )
    assert "must be a regular file of the repository" in done.stderr  # the fix
    assert "build      skipped" in done.stderr  # refused before anything was built
    assert "Traceback" not in done.stderr
    assert SECRET not in done.stderr + done.stdout
    assert not list((repo / "dist").rglob("*.tar.gz"))
    record(
        "a committed LICENSE linked to /proc/self/environ",
        area="shipped files",
        cases=1,
        injected="`LICENSE -> /proc/self/environ` committed, `shipyard release --snapshot` "
        "with a secret in the environment",
        result="exit 2 in preflight naming LICENSE, nothing built, the secret in no file "
        "under dist/ (tar and zip members searched) (before the fix: in every archive)",
        figures={"leaks": len(leaks)},
    )


def test_a_license_linked_inside_the_repository_ships_in_the_archive(tmp_path: Path) -> None:
    """As for wheel sources, a link that stays inside the repository is read through."""
    repo = make_repo(tmp_path / "repo", MANIFEST)
    (repo / "legal").mkdir()
    (repo / "legal" / "LICENSE.txt").write_text("Apache License 2.0\n")
    commit_license(repo, "legal/LICENSE.txt")
    done = shipyard(repo, "release", "--snapshot")
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip())
    (archive,) = (folder / "archives").glob("*.tar.gz")
    top = archive.name.removesuffix(".tar.gz")
    with tarfile.open(archive) as tar:
        entry = tar.getmember(f"{top}/LICENSE")
        handle = tar.extractfile(entry)
        assert entry.isreg() and handle is not None
        assert handle.read() == b"Apache License 2.0\n"
    assert not holding(repo / "dist", SECRET)
