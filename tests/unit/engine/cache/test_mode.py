"""--cache-mode and $SHIPYARD_CACHE_MODE: the three modes, the flag first, bad values named."""

from __future__ import annotations

import pytest

from shipyard.engine.cache.mode import MODE_VARIABLE, MODES, cache_mode
from shipyard.errors import UsageError


def test_read_write_is_the_default() -> None:
    assert cache_mode(None, {}) == "read-write"
    assert cache_mode("", {MODE_VARIABLE: "  "}) == "read-write"


@pytest.mark.parametrize("mode", MODES)
def test_each_mode_from_the_flag_or_the_variable(mode: str) -> None:
    assert cache_mode(mode, {}) == mode
    assert cache_mode(None, {MODE_VARIABLE: mode}) == mode


def test_the_flag_wins_over_the_variable() -> None:
    assert cache_mode("write-only", {MODE_VARIABLE: "read-only"}) == "write-only"


@pytest.mark.parametrize(
    ("flag", "env", "named"),
    [
        ("readonly", {}, "--cache-mode=readonly"),
        (None, {MODE_VARIABLE: "pull"}, f"{MODE_VARIABLE}=pull"),
    ],
)
def test_a_bad_mode_names_where_it_came_from_and_the_choices(
    flag: str | None, env: dict[str, str], named: str
) -> None:
    with pytest.raises(UsageError) as caught:
        cache_mode(flag, env)
    assert caught.value.exit_code == 2
    assert named in str(caught.value) and "read-write, read-only, write-only" in str(caught.value)
