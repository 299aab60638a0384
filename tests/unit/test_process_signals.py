"""An interrupted build ends its own process tree and nothing else (issue 12, item 9).

The old handler read the tree's process ids when the interrupt came and sent
SIGKILL to them after the grace period; a pid freed in between and handed to an
unrelated process got that process killed. The kernel hands out pids in order,
and root can choose the next one through /proc/sys/kernel/ns_last_pid, so the
reuse is produced for real here, not imitated. (Giving each step a process
group of its own also passes this test, but then a SIGKILL of shipyard's group,
as a cancelled CI job sends, leaves the steps running: test_crash.py caught it.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard import process as proc
from tests.reliability import record

NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")

# The build step: ignores SIGTERM (as a slow backend might), starts a helper that
# ends on its own after a moment, reaps it, then lingers until killed.
LEADER = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
helper = subprocess.Popen(["sleep", "0.6"])
open(sys.argv[1] + ".tmp", "w").write(str(helper.pid))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
helper.wait()
time.sleep(60)
"""

# A build step whose child outlives it unless the group is ended.
TREE = """
import subprocess, sys, time
child = subprocess.Popen(["sleep", "60"])
open(sys.argv[1] + ".tmp", "w").write(str(child.pid))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_for(path: Path, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)
    return int(path.read_text())


def _start(code: str, tmp_path: Path) -> tuple[threading.Thread, list[int], Path]:
    marker = tmp_path / "pid"
    codes: list[int] = []

    def build() -> None:
        command = [sys.executable, "-c", code, str(marker)]
        codes.append(proc.run_logged(command, tmp_path / "log", env=dict(os.environ)))

    worker = threading.Thread(target=build)
    worker.start()
    return worker, codes, marker


def _process_at(pid: int) -> subprocess.Popen[bytes] | None:
    """An unrelated process started with exactly `pid`, or None if another took it."""
    NS_LAST_PID.write_text(str(pid - 1))
    victim = subprocess.Popen(["sleep", "30"])
    if victim.pid == pid:
        return victim
    victim.kill()
    victim.wait()
    return None


@pytest.fixture(autouse=True)
def _allow_processes() -> Iterator[None]:
    proc.reset()
    yield
    proc.reset()  # terminate_all leaves the module refusing new processes


@pytest.mark.reliability
@pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(NS_LAST_PID, os.W_OK),
    reason="choosing the next pid needs root and a writable ns_last_pid",
)
def test_a_reused_pid_is_not_killed_by_the_interrupt_handler(tmp_path: Path) -> None:
    trials = int(os.environ.get("SHIPYARD_SIGNAL_TRIALS", "2"))
    survived = 0
    for trial in range(trials):
        folder = tmp_path / str(trial)
        folder.mkdir()
        proc.reset()
        worker, codes, marker = _start(LEADER, folder)
        helper = _wait_for(marker)
        stopper = threading.Thread(target=proc.terminate_all, kwargs={"grace": 2.0})
        stopper.start()
        # The helper ends on its own inside the grace period and is reaped; its
        # pid is then free, and an unrelated process gets it.
        deadline = time.monotonic() + 5
        while _alive(helper) or Path(f"/proc/{helper}").exists():
            assert time.monotonic() < deadline, "the helper did not end"
            time.sleep(0.01)
        victim = None
        for _ in range(20):
            victim = _process_at(helper)
            if victim is not None:
                break
        assert victim is not None, f"could not start a process with pid {helper}"
        try:
            stopper.join(10)
            worker.join(10)
            assert not stopper.is_alive() and not worker.is_alive()
            assert codes and codes[0] < 0, f"the build step was not ended: {codes}"
            assert victim.poll() is None, f"unrelated process {helper} was killed"
            survived += 1
        finally:
            victim.kill()
            victim.wait()
    record(
        "interrupt handler and a reused pid",
        area="signals",
        cases=trials,
        injected=(
            "a build step ignoring SIGTERM whose helper ends during the grace period; "
            "its pid handed to an unrelated process (ns_last_pid) before the kill"
        ),
        result=f"{survived}/{trials} unrelated processes survived; 0 killed; the build tree ended",
        figures={"trials": trials, "killed": trials - survived},
    )


def test_the_whole_tree_of_a_build_step_is_ended(tmp_path: Path) -> None:
    worker, codes, marker = _start(TREE, tmp_path)
    child = _wait_for(marker)
    assert _alive(child)
    proc.terminate_all(grace=2.0)
    worker.join(10)
    assert codes and codes[0] < 0
    deadline = time.monotonic() + 5
    while _alive(child):
        assert time.monotonic() < deadline, f"child {child} outlived the interrupted build"
        time.sleep(0.01)


def test_no_process_starts_once_stopping(tmp_path: Path) -> None:
    proc.terminate_all()
    assert proc.run_logged(["true"], tmp_path / "log", env=dict(os.environ)) == -2
