"""Retry policy for registry and index traffic: bounded exponential backoff with jitter.

Only faults that a later attempt can cure are retried: a dropped or refused
connection, a time-out, an answer cut short, 429 (honouring Retry-After) and
500/502/503/504. Any other 4xx is the client's fault and fails at once. Attempts
and total time are both bounded, so a dead registry or index fails in bounded time.
`failure_reason` names what went wrong on the wire, for the retry log and errors.
`Retrier` is the one retry loop of the registry and index clients: it retries the
transient `RemoteError`s of an operation, logs each retry with its reason on the
`shipyard._http.retry` logger, and gives up with an error saying how many attempts
were made.
"""

from __future__ import annotations

import email.utils
import http.client
import logging
import random
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

import requests

from shipyard._http.errors import RemoteError

__all__ = [
    "DEFAULT_ATTEMPTS",
    "DEFAULT_DEADLINE",
    "TRANSIENT_ERRORS",
    "TRANSIENT_STATUS",
    "Backoff",
    "Retrier",
    "RetryPolicy",
    "exception_chain",
    "failure_reason",
    "parse_retry_after",
]

_log = logging.getLogger(__name__)
_log.addHandler(logging.NullHandler())  # the library never prints; the CLI configures logging
_T = TypeVar("_T")

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


# The default budget, sized for the fault rate docs/reliability.md promises: a whole
# release finishes in at least 999 of 1,000 runs when 25% of all requests fail.
#
# An operation fails only when every one of its attempts fails. Most attempts are
# one request (p = 0.25 of failing); a whole-blob upload is two (POST, then PUT), so
# q = 1 - 0.75**2 = 0.4375. A release of two images to two hubs and two wheels makes
# about 200 operations, about 20 of them blob uploads
# (tests/integration/test_faults_release.py counts them). With N attempts each:
#
#   P(release fails) ~ 20 * 0.4375**N + 180 * 0.25**N   must be < 1e-3
#   N = 5  (the old budget):  20 * 1.6e-2  + 180 * 9.8e-4  ~ 0.5     (fails often)
#   N = 8:                    20 * 1.3e-3  + 180 * 1.5e-5  ~ 2.9e-2
#   N = 12:                   20 * 4.9e-5  + 180 * 6.0e-8  ~ 1.0e-3  (just at the line)
#   N = 16:                   20 * 1.8e-6  + 180 * 2.3e-10 ~ 3.6e-5  (28x margin)
#
# so 16 attempts; a 5x larger release (1,000 operations) still stays under 2e-4.
# Backoff: 0.5 s doubling to at most 8 s, half of it jittered; 15 pauses add at most
# 0.5+1+2+4+8*11 = 95.5 s to an operation that fails every time, so a dead server
# gives up within the time cap below.
#
# Time cap: a stall (no answer) costs a whole read time-out, 120 s by default
# (SHIPYARD_HTTP_TIMEOUT), 30 s for the package index. At 25% faults with stalls an
# eighth of them (p = 1/32 per request), k stalls before the first success happen
# with (1/32 / (1/32 + 3/4))**k = 0.04**k per operation: 200 * 0.04**5 = 2e-5. So the
# cap must fit 5 stalls at 120 s plus all pauses: 5 * 120 + 95.5 = 695.5 s <= 900 s
# (it fits 16 stalls at the index's 30 s: 16 * 30 + 95.5 = 575.5 s). A fault that
# never clears fails after 16 attempts or 900 s, whichever comes first.
DEFAULT_ATTEMPTS = 16
DEFAULT_BASE_DELAY = 0.5
DEFAULT_MAX_DELAY = 8.0
DEFAULT_DEADLINE = 900.0


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry; `sleep`, `clock` and `rng` are injectable for tests.

    The defaults are sized above (DEFAULT_ATTEMPTS): at 25% injected faults a whole
    release gives up in fewer than 1 of 1,000 runs, and a dead server in bounded time.
    """

    attempts: int = DEFAULT_ATTEMPTS
    base_delay: float = DEFAULT_BASE_DELAY
    max_delay: float = DEFAULT_MAX_DELAY
    deadline: float = DEFAULT_DEADLINE
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)
    rng: random.Random = field(default_factory=random.Random, compare=False)
    # Log each retry at DEBUG instead of WARNING: for a caller that says once what a
    # failure means (a shared cache that is down: one warning, the build goes on).
    quiet: bool = False

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

    def renew(self) -> None:
        """Count attempts afresh (after real progress), keeping the time already spent.

        The deadline still runs from `policy.start()`: progress earns attempts, never time.
        """
        self.attempt = 1

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

    def refund(self) -> None:
        """Give back the attempt just counted: for a failure that is only the
        consequence of one already counted (the time cap still runs)."""
        self.attempt = max(1, self.attempt - 1)

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


class Retrier:
    """Runs operations within a `RetryPolicy`, retrying their transient `RemoteError`s.

    `where` (a registry host, or "") prefixes each retry line; `error` is the class
    of the final error once the budget is spent; `on_retry` is called before each
    pause (to count retries).
    """

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        where: str = "",
        error: type[RemoteError] = RemoteError,
        on_retry: Callable[[], None] | None = None,
    ) -> None:
        self.policy = policy
        self._where = where
        self._error = error
        self._on_retry = on_retry

    def start(self) -> Backoff:
        """A fresh budget of attempts, for a loop that calls `pause_or_raise` itself."""
        return self.policy.start()

    def run(self, op: str, attempt: Callable[[], _T]) -> _T:
        """Call `attempt` until it returns, retrying its transient RemoteErrors."""
        backoff = self.policy.start()
        while True:
            try:
                return attempt()
            except RemoteError as exc:
                self.pause_or_raise(op, exc, backoff)

    def pause_or_raise(self, op: str, exc: RemoteError, backoff: Backoff) -> None:
        """After `exc`: log and sleep before a retry, or raise when it is final.

        A non-transient error is raised as it is; a transient one whose budget is
        spent becomes a final error saying how many attempts were made.
        """
        if not exc.transient:
            raise exc
        delay = backoff.next_delay(exc.retry_after)
        if delay is None:
            detail = f"{exc.detail}; gave up after {backoff.attempt} attempts"
            raise self._error(self._where, op, detail, status=exc.status, codes=exc.codes) from exc
        where = f"{self._where}: " if self._where else ""
        _log.log(
            logging.DEBUG if self.policy.quiet else logging.WARNING,
            "%s%s: retry %d of %d in %.2f s after: %s",
            where,
            op,
            backoff.attempt,
            backoff.attempts - 1,
            delay,
            exc.detail,
        )
        if self._on_retry is not None:
            self._on_retry()
        backoff.sleep(delay)
