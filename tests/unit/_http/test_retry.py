"""The retry policy: which faults are transient, how long to wait, when to give up."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from shipyard._http.retry import (
    DEFAULT_ATTEMPTS,
    DEFAULT_DEADLINE,
    TRANSIENT_STATUS,
    RetryPolicy,
    parse_retry_after,
)


def test_transient_statuses_are_exactly_the_retryable_ones() -> None:
    assert frozenset({429, 500, 502, 503, 504}) == TRANSIENT_STATUS
    for status in (400, 401, 403, 404, 405, 409, 413, 416, 501):
        assert status not in TRANSIENT_STATUS


def test_parse_retry_after() -> None:
    now = datetime(2024, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(" 0 ") == 0.0
    assert parse_retry_after("Mon, 01 Jan 2024 12:00:30 GMT", now=now) == 30.0
    assert parse_retry_after("Mon, 01 Jan 2024 11:00:00 GMT", now=now) == 0.0
    for junk in (None, "", "soon", "-5", "1.5e3"):
        assert parse_retry_after(junk, now=now) is None


@pytest.mark.parametrize("seed", range(20))
def test_delay_is_exponential_with_equal_jitter_and_capped(seed: int) -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=4.0, rng=random.Random(seed))
    for retry, ceiling in ((1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 4.0), (9, 4.0)):
        delay = policy.delay(retry)
        assert ceiling / 2 <= delay <= ceiling
    assert policy.delay(1, retry_after=9.0) == 9.0


def test_backoff_stops_after_the_attempts() -> None:
    slept: list[float] = []
    policy = RetryPolicy(attempts=4, sleep=slept.append, rng=random.Random(1))
    backoff = policy.start()
    assert [backoff.wait() for _ in range(5)] == [True, True, True, False, False]
    assert len(slept) == 3
    assert backoff.attempt == 4


def test_backoff_stops_at_the_deadline() -> None:
    clock = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    policy = RetryPolicy(
        attempts=100,
        base_delay=1.0,
        max_delay=8.0,
        deadline=20.0,
        sleep=sleep,
        clock=lambda: clock[0],
    )
    backoff = policy.start()
    while backoff.wait():
        pass
    assert sum(slept) <= 20.0
    assert len(slept) < 10
    assert not policy.start().wait(retry_after=21.0), "a Retry-After past the deadline gives up"


def test_next_delay_plans_without_sleeping_and_sleep_counts_the_attempt() -> None:
    slept: list[float] = []
    policy = RetryPolicy(attempts=3, base_delay=1.0, sleep=slept.append, rng=random.Random(2))
    backoff = policy.start()
    assert backoff.attempts == 3
    first = backoff.next_delay()
    assert first is not None and 0.5 <= first <= 1.0
    assert slept == [] and backoff.attempt == 1, "planning a pause neither sleeps nor counts"
    backoff.sleep(first)
    assert slept == [first] and backoff.attempt == 2 and backoff.last_delay == first
    assert backoff.next_delay(retry_after=5.0) == 5.0, "Retry-After beyond the backoff is honoured"
    backoff.sleep(5.0)
    assert backoff.next_delay() is None, "three attempts made: the budget is spent"


def test_retry_after_past_the_deadline_gives_up_at_once() -> None:
    policy = RetryPolicy(deadline=30.0, clock=lambda: 0.0)
    assert policy.start().next_delay(retry_after=29.0) == 29.0
    assert policy.start().next_delay(retry_after=31.0) is None


def release_failure_odds(attempts: int, fault_rate: float = 0.25) -> float:
    """P(a release fails): ~20 two-request blob uploads and ~180 one-request operations."""
    two_requests = 1 - (1 - fault_rate) ** 2
    return 20 * two_requests**attempts + 180 * fault_rate**attempts


def test_default_budget_meets_the_release_figure_and_the_old_one_did_not() -> None:
    """999 of 1,000 releases at 25% faults: the default does it, 5 attempts did not."""
    policy = RetryPolicy()
    assert policy.attempts == DEFAULT_ATTEMPTS
    assert release_failure_odds(policy.attempts) < 1e-3 / 10, "with a 10x margin"
    assert release_failure_odds(5) > 0.1, "the old budget failed about every other release"
    # The time cap fits every pause plus 5 stalls at the default 120 s read time-out.
    pauses = sum(min(policy.max_delay, policy.base_delay * 2**r) for r in range(15))
    assert 5 * 120 + pauses <= policy.deadline == DEFAULT_DEADLINE


def test_default_budget_gives_up_on_a_dead_server_within_the_cap() -> None:
    clock = [0.0]

    def sleep(seconds: float) -> None:
        clock[0] += seconds + 120.0  # each attempt also waits a whole read time-out

    policy = RetryPolicy(sleep=sleep, clock=lambda: clock[0], rng=random.Random(3))
    backoff = policy.start()
    while backoff.wait():
        pass
    assert backoff.attempt < policy.attempts, "the time cap ended it first"
    assert clock[0] <= policy.deadline + 120.0
