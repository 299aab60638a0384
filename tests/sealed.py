"""No process may start, except git answering about the repository.

The injection and fuzz tests hold shipyard to "nothing a manifest says reaches a
process". Reading a valid repository's projects asks git (`git ls-files` with
fixed arguments, in the manifest's folder): that one program may run; any other
start fails the test, naming what was started.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest

__all__ = ["no_process", "seal"]

_POPEN = subprocess.Popen.__init__


def no_process(*args: Any, **kwargs: Any) -> Any:
    """Fail the test: something started a process."""
    raise AssertionError(f"a manifest made shipyard start a process: {args!r:.300}")


def _git_only(self: Any, args: Any, *rest: Any, **kwargs: Any) -> Any:
    if not (isinstance(args, list) and args and args[0] == "git"):
        no_process(args)
    return _POPEN(self, args, *rest, **kwargs)


def seal(monkeypatch: pytest.MonkeyPatch, *, git: bool = False) -> None:
    """Make every way of starting a process fail; with `git`, but git itself."""
    monkeypatch.setattr(subprocess.Popen, "__init__", _git_only if git else no_process)
    monkeypatch.setattr(os, "system", no_process)
    monkeypatch.setattr(os, "posix_spawn", no_process)
    monkeypatch.setattr(os, "fork", no_process)
