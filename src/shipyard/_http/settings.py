"""What the environment sets for HTTP: how long to wait for an answer, a private CA."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from shipyard._environ import HTTP_TIMEOUT
from shipyard.errors import UsageError

__all__ = ["DEFAULT_TIMEOUT", "TIMEOUT_VARIABLE", "ca_file_from", "http_timeout"]

DEFAULT_TIMEOUT = (10.0, 120.0)
TIMEOUT_VARIABLE = HTTP_TIMEOUT.name


def http_timeout(
    environ: Mapping[str, str], default: tuple[float, float] = DEFAULT_TIMEOUT
) -> tuple[float, float]:
    """(connect, read) seconds: `$SHIPYARD_HTTP_TIMEOUT` bounds both, else `default`."""
    raw = environ.get(TIMEOUT_VARIABLE, "").strip()
    if not raw:
        return default
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < 86400:
        raise UsageError(
            f"{TIMEOUT_VARIABLE}={raw!r}: give the seconds to wait for an answer, e.g. 30"
        )
    return min(default[0], seconds), seconds


def ca_file_from(
    environ: Mapping[str, str], variable: str, given: Path | None, what: str
) -> Path | None:
    """The private CA bundle: `given`, else the file `$variable` names; checked to exist.

    `what` names the server in the error, e.g. `registry 127.0.0.1:5000`.
    """
    if given is None and environ.get(variable):
        given = Path(environ[variable])
        if not given.is_file():
            raise UsageError(
                f"{what}: {variable}={given} names no file; give the path of the PEM "
                "certificate of the CA that signed the server's"
            )
    elif given is not None and not given.is_file():
        raise UsageError(f"{what}: CA certificate {given} does not exist")
    return given
