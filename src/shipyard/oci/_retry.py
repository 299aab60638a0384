"""Retry policy for registry and index traffic: bounded exponential backoff with jitter.

Only faults that a later attempt can cure are retried: a dropped or refused
connection, a time-out, an answer cut short, 429 (honouring Retry-After) and
500/502/503/504. Any other 4xx is the client's fault and fails at once. Attempts
and total time are both bounded, so a dead registry or index fails in bounded time.
`failure_reason` names what went wrong on the wire, for the retry log and errors.
"""

from __future__ import annotations

import email.utils
import http.client
import random
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import requests

__all__ = [
    "TRANSIENT_ERRORS",
    "TRANSIENT_STATUS",
    "Backoff",
    "RetryPolicy",
    "exception_chain",
    "failure_reason",
    "parse_retry_after",
]

TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
# No answer, a time-out, or a body cut short or undecodable: a later attempt may succeed.
TRANSIENT_ERRORS: tuple[type[requests.RequestException], ...] = (
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
    requests.exceptions.ContentDecodingError,
)


def exception_chain(exc: BaseException) -> list[BaseException]:
    """`exc` and the exceptions it wraps (causes, contexts, urllib3 reasons and args)."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo and len(seen) < 12:
        cur = todo.pop()
        if any(cur is s for s in seen):
            continue
        seen.append(cur)
        linked = (cur.__cause__, cur.__context__, getattr(cur, "reason", None), *cur.args)
        todo.extend(x for x in linked if isinstance(x, BaseException))
    return seen


def failure_reason(exc: BaseException) -> str:
    """The innermost readable cause of a connection failure, without URLs or headers."""
    causes = exception_chain(exc)
    for cur in causes:
        if isinstance(cur, ssl.SSLCertVerificationError):
            return cur.verify_message or "certificate verify failed"
        if isinstance(cur, http.client.IncompleteRead):
            read = cur.partial if isinstance(cur.partial, int) else len(cur.partial)
            return f"the body was cut short: {read} bytes read, {cur.expected} missing"
    for cur in reversed(causes):
        if isinstance(cur, OSError) and cur.strerror:
            return cur.strerror
    if isinstance(exc, requests.Timeout):
        return "timed out"
    return type(causes[-1]).__name__


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date), else None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry; `sleep`, `clock` and `rng` are injectable for tests."""

    attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 10.0
    deadline: float = 120.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)
    rng: random.Random = field(default_factory=random.Random, compare=False)

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        """The pause before retry number `retry` (1-based): equal jitter, at least Retry-After."""
        ceiling = min(self.max_delay, self.base_delay * 2.0 ** (retry - 1))
        jittered = ceiling / 2 + self.rng.uniform(0, ceiling / 2)
        return max(jittered, retry_after or 0.0)

    def start(self) -> Backoff:
        """A fresh budget of attempts for one operation."""
        return Backoff(self)


class Backoff:
    """The attempts left for one operation; `wait()` sleeps before the next or says to give up."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        self._started = policy.clock()
        self.attempt = 1
        self.last_delay = 0.0

    @property
    def attempts(self) -> int:
        """The most attempts this budget allows."""
        return self._policy.attempts

    def next_delay(self, retry_after: float | None = None) -> float | None:
        """The pause before the next attempt, or None once the budget is spent; never sleeps.

        A Retry-After longer than the backoff is honoured, but one that would end past
        the deadline gives up at once instead of waiting for nothing.
        """
        policy = self._policy
        if self.attempt >= policy.attempts:
            return None
        delay = policy.delay(self.attempt, retry_after)
        if policy.clock() - self._started + delay > policy.deadline:
            return None
        return delay

    def sleep(self, delay: float) -> None:
        """Pause `delay` seconds (from `next_delay`) and count the next attempt."""
        self._policy.sleep(delay)
        self.attempt += 1
        self.last_delay = delay

    def wait(self, retry_after: float | None = None) -> bool:
        """Sleep before another attempt and return True; return False once the budget is spent."""
        delay = self.next_delay(retry_after)
        if delay is None:
            return False
        self.sleep(delay)
        return True
