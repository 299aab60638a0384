"""Retry policy for registry traffic: bounded exponential backoff with jitter, for transient faults.

Only faults that a later attempt can cure are retried: a dropped or refused
connection, a time-out, 429 (honouring Retry-After) and 500/502/503/504. Any
other 4xx is the client's fault and fails at once. Attempts and total time are
both bounded, so a dead registry fails a push in bounded time.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

__all__ = ["TRANSIENT_STATUS", "Backoff", "RetryPolicy", "parse_retry_after"]

TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


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

    def wait(self, retry_after: float | None = None) -> bool:
        """Sleep before another attempt and return True; return False once the budget is spent."""
        policy = self._policy
        if self.attempt >= policy.attempts:
            return False
        delay = policy.delay(self.attempt, retry_after)
        if policy.clock() - self._started + delay > policy.deadline:
            return False
        policy.sleep(delay)
        self.attempt += 1
        self.last_delay = delay
        return True
