"""Which way a build uses its shared cache: `read-write`, `read-only` or `write-only`.

`--cache-mode` (else `$SHIPYARD_CACHE_MODE`, else read-write) says it, in the words
of the ecosystem (Gradle's `push` on/off, bazel's `--remote_upload_local_results`
and `--noremote_accept_cached` as one flag):

- `read-write`: restore hits from the shared cache, store what the build made;
- `read-only`: restore only, never write, not even after a miss (pull requests,
  whose code is untrusted);
- `write-only`: never restore, store everything the build made or found in its
  local cache (a warming job, which fills the shared cache for the others).

The local cache is read and written in every mode. This module is light: it is
checked on every build, with or without a shared cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from shipyard._environ import CACHE_MODE
from shipyard.errors import UsageError

__all__ = ["MODES", "MODE_VARIABLE", "CacheMode", "cache_mode"]

CacheMode = Literal["read-write", "read-only", "write-only"]
MODES: tuple[CacheMode, ...] = ("read-write", "read-only", "write-only")
MODE_VARIABLE = CACHE_MODE.name


def cache_mode(flag: str | None, env: Mapping[str, str]) -> CacheMode:
    """`--cache-mode` (`flag`), else $SHIPYARD_CACHE_MODE, else read-write; UsageError
    (exit 2) naming the flag or the variable when it is not one of MODES."""
    if flag:
        given, where = flag.strip(), f"--cache-mode={flag}"
    else:
        given = env.get(MODE_VARIABLE, "").strip()
        where = f"{MODE_VARIABLE}={given}"
    if not given:
        return "read-write"
    if given not in MODES:
        raise UsageError(f"{where}: write {', '.join(MODES)}")
    return given
