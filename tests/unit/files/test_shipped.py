"""`read_shipped_file`: a file a release copies from the checkout as it is (the license
in the release archives) is read under the rules wheel sources follow.

A symlink is followed while it stays inside the repository and out of .git; what it
names must be a regular file; a swap between the check and the read fails the read
instead of escaping. Every refusal is a UsageError (exit 2) naming the path and the
fix. The license regressions these rules close are in
tests/unit/release/test_archives_license.py.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from shipyard.errors import UsageError
from shipyard.files.shipped import read_shipped_file
from tests.reliability import record
from tests.unit.files.test_sources_hostile import within

SECRET = b"outside-secret-8e27aa\n"
TEXT = b"Apache License 2.0\n"
FIX = "must be a regular file of the repository or a symlink to one inside it"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with a license text in legal/, and a secret beside the repository."""
    (tmp_path / "repo" / "legal").mkdir(parents=True)
    (tmp_path / "repo" / "legal" / "LICENSE.txt").write_bytes(TEXT)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "token").write_bytes(SECRET)
    return tmp_path / "repo"


def refused(path: Path, root: Path) -> str:
    """The message of the UsageError reading `path` raises; it names the path and the fix."""
    got = within(20.0, lambda: read_shipped_file(path, root))
    assert isinstance(got, UsageError), f"expected a UsageError, got {got!r}"
    message = str(got)
    assert message.startswith(f"{path}: "), message
    assert FIX in message, message
    assert SECRET.decode().strip() not in message
    return message


def test_a_regular_file_is_read(repo: Path) -> None:
    assert read_shipped_file(repo / "legal" / "LICENSE.txt", repo) == TEXT


def test_a_symlink_to_a_file_inside_the_repository_is_read_through(repo: Path) -> None:
    """Allowed, as in wheel sources: a license kept in one place and linked at the top."""
    (repo / "LICENSE").symlink_to("legal/LICENSE.txt")
    assert read_shipped_file(repo / "LICENSE", repo) == TEXT
    (repo / "COPYING").symlink_to(repo / "LICENSE")  # absolute, and a link to a link
    assert read_shipped_file(repo / "COPYING", repo) == TEXT


@pytest.mark.skipif(not os.path.isfile("/proc/self/environ"), reason="no /proc here")
def test_a_symlink_to_the_environment_is_refused(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHIPYARD_TEST_TOKEN", SECRET.decode().strip())
    (repo / "LICENSE").symlink_to("/proc/self/environ")
    message = refused(repo / "LICENSE", repo)
    assert "a symlink to '/proc/self/environ' leaves the repository" in message


@pytest.mark.parametrize("absolute", [True, False])
def test_a_symlink_to_a_file_outside_the_repository_is_refused(repo: Path, absolute: bool) -> None:
    target = repo.parent / "outside" / "token"
    (repo / "LICENSE").symlink_to(target if absolute else os.path.relpath(target, repo))
    assert "leaves the repository" in refused(repo / "LICENSE", repo)


def test_a_link_inside_to_a_link_out_is_refused(repo: Path) -> None:
    (repo / "legal" / "NOTICE").symlink_to(repo.parent / "outside" / "token")
    (repo / "LICENSE").symlink_to("legal/NOTICE")
    assert "leaves the repository" in refused(repo / "LICENSE", repo)


def test_a_file_under_a_folder_linked_out_is_refused(repo: Path) -> None:
    (repo / "vendor").symlink_to(repo.parent / "outside")
    message = refused(repo / "vendor" / "token", repo)
    assert "a path through a symlink leaves the repository" in message


def test_a_symlink_into_git_is_refused(repo: Path) -> None:
    """.git/config holds what CI checkouts leave there (an auth header with a token);
    sources never read .git, and neither does a shipped file."""
    (repo / ".git").mkdir()
    (repo / ".git" / "config").write_bytes(SECRET)
    (repo / "LICENSE").symlink_to(".git/config")
    assert "leads into .git/, which is never shipped" in refused(repo / "LICENSE", repo)


def test_a_path_out_of_the_repository_by_dotdot_is_refused(repo: Path) -> None:
    path = repo / ".." / "outside" / "token"
    assert "is not in the repository" in refused(path, repo)


def test_a_fifo_is_refused_without_blocking(repo: Path) -> None:
    os.mkfifo(repo / "LICENSE")
    assert "is a named pipe (FIFO)" in refused(repo / "LICENSE", repo)


def test_a_symlink_to_a_fifo_inside_is_refused_without_blocking(repo: Path) -> None:
    os.mkfifo(repo / "legal" / "pipe")
    (repo / "LICENSE").symlink_to("legal/pipe")
    assert "is a named pipe (FIFO)" in refused(repo / "LICENSE", repo)


def test_a_folder_is_refused(repo: Path) -> None:
    (repo / "LICENSE").mkdir()
    assert "is a folder" in refused(repo / "LICENSE", repo)
    assert "is a folder" in refused(repo, repo)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device file needs root")
def test_a_device_file_is_refused(repo: Path) -> None:
    os.mknod(repo / "LICENSE", stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero
    assert "is a character device" in refused(repo / "LICENSE", repo)


def test_a_dangling_symlink_and_a_loop_are_refused(repo: Path) -> None:
    (repo / "LICENSE").symlink_to("legal/GONE")
    assert "a symlink to 'legal/GONE', which does not exist" in refused(repo / "LICENSE", repo)
    (repo / "a").symlink_to("b")
    (repo / "b").symlink_to("a")
    assert "a symlink to 'b' that loops" in refused(repo / "a", repo)


def test_a_missing_file_is_refused(repo: Path) -> None:
    assert "no such file" in refused(repo / "LICENSE", repo)


Swap = Callable[[Path], None]


def _to_link_out(repo: Path) -> None:
    (repo / "legal" / "LICENSE.txt").unlink()
    (repo / "legal" / "LICENSE.txt").symlink_to(repo.parent / "outside" / "token")


def _folder_to_link_out(repo: Path) -> None:
    (repo / "legal" / "LICENSE.txt").unlink()
    (repo / "legal").rmdir()
    (repo / "legal").symlink_to(repo.parent / "outside")
    (repo.parent / "outside" / "LICENSE.txt").write_bytes(SECRET)


def _to_fifo(repo: Path) -> None:
    (repo / "legal" / "LICENSE.txt").unlink()
    os.mkfifo(repo / "legal" / "LICENSE.txt")


@pytest.mark.parametrize(
    ("swap", "says"),
    [
        (_to_link_out, "changed while it was read"),
        (_folder_to_link_out, "changed while it was read"),
        (_to_fifo, "changed while it was read: it is now a named pipe (FIFO)"),
    ],
)
def test_a_swap_between_the_check_and_the_read_is_not_an_escape(
    repo: Path, monkeypatch: pytest.MonkeyPatch, swap: Swap, says: str
) -> None:
    """The file is checked, then (at the first open, the repository's folder) replaced:
    by a link out, its folder by a link out, or by a pipe. The read must fail, never
    return the secret, never block."""
    real_open = os.open
    swapped: list[bool] = []

    def open_after_swap(path: str | Path, flags: int, *args: object, **kwargs: object) -> int:
        if not swapped:
            swap(repo)
            swapped.append(True)
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", open_after_swap)
    message = refused(repo / "legal" / "LICENSE.txt", repo)
    assert swapped and says in message


@pytest.mark.reliability
def test_a_file_larger_than_the_cap_is_refused_naming_its_size(repo: Path) -> None:
    """Regression (security review, item 3c): `read_shipped_file` read the whole file, so a
    license path naming a huge (here sparse, 64 MiB) file was read into memory whole."""
    from shipyard.files import shipped

    cap = getattr(shipped, "SHIPPED_FILE_MAX", 16 << 20)
    assert cap == 16 << 20
    big = repo / "LICENSE"
    with big.open("wb") as handle:
        handle.truncate(64 << 20)
    got = within(20.0, lambda: read_shipped_file(big, repo))
    assert isinstance(got, UsageError), f"expected a UsageError, got {type(got).__name__}"
    message = str(got)
    assert message.startswith(f"{big}: "), message
    assert f"{64 << 20} bytes" in message and f"{cap} bytes" in message, message
    # At the cap it is read.
    with big.open("r+b") as handle:
        handle.truncate(cap)
    assert len(read_shipped_file(big, repo)) == cap
    record(
        "a huge file named as a release's license",
        area="resource bounds",
        cases=2,
        injected="a sparse 64 MiB file, then one of exactly 16 MiB, read as the license a "
        "release ships",
        result="the 64 MiB file refused with a UsageError naming the path, its size and "
        "the 16 MiB cap, before reading it; the 16 MiB one read",
        figures={"cap_bytes": cap, "file_bytes": 64 << 20},
    )
