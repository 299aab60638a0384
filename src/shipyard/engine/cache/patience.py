"""How long an HTTP shared-cache client waits: briefly until the server first answers.

A server that accepts connections and never answers (a hung process, a proxy
with nothing behind it) would otherwise cost every try of the first call its
whole time-out before the build goes on without it. So until the server has
answered once, a call and its retries together take at most the connection's
`connect_timeout` (default 5 s); from its first answer on, each call waits up to
`timeout` and is tried `retries` more times. Retries are quiet (logged at DEBUG):
the cache's one warning says what a failure means.

`Patience` is the `on_request` hook of an HTTP client (the HTTP cache's, the
registry's) that makes the switch. The gRPC client applies the same budget to its
first call, the capabilities (`shipyard.engine.cache.reapi.client`).
"""

from __future__ import annotations

import threading

from shipyard._http.retry import RetryPolicy
from shipyard._http.transport import Client
from shipyard.engine.cache.endpoint import Connection

__all__ = ["Patience", "first_contact", "per_call"]


def first_contact(connection: Connection) -> tuple[tuple[float, float], RetryPolicy]:
    """(connect, read) time-outs and retries until the server has answered once: every
    wait within `connect_timeout` (and `timeout`), all tries within `connect_timeout`."""
    seconds = min(connection.connect_timeout, connection.timeout)
    retry = RetryPolicy(
        attempts=connection.retries + 1,
        base_delay=0.2,
        max_delay=2.0,
        deadline=connection.connect_timeout,
        quiet=True,
    )
    return (seconds, seconds), retry


def per_call(connection: Connection) -> tuple[tuple[float, float], RetryPolicy]:
    """(connect, read) time-outs and retries once the server has answered."""
    timeout = connection.timeout
    retry = RetryPolicy(
        attempts=connection.retries + 1,
        base_delay=0.2,
        max_delay=min(8.0, timeout),
        deadline=(connection.retries + 1) * (timeout + 8.0),
        quiet=True,
    )
    return (min(connection.connect_timeout, timeout), timeout), retry


class Patience:
    """An `on_request` hook: the first answer of the server switches `client` from the
    first contact's patience to the connection's (`attach` it once the client exists)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._client: Client | None = None
        self._lock = threading.Lock()
        self.answered = False

    def attach(self, client: Client) -> None:
        """The client whose patience this hook switches."""
        self._client = client

    def __call__(self, method: str, path: str, status: int | None) -> None:
        """After each exchange: on the first one that got an answer, switch."""
        if status is None or self.answered:
            return
        with self._lock:
            if self.answered or self._client is None:
                return
            self.answered = True
            self._client.set_patience(*per_call(self._connection))
