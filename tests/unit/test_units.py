"""One size grammar (issue 27): a size means the same bytes in the manifest's budgets,
the cache limit and `--max-size`."""

from __future__ import annotations

import pytest

from shipyard._units import parse_size
from shipyard.engine.cache.local import cache_limit
from shipyard.engine.cache.local import parse_size as cache_size
from shipyard.errors import UsageError
from shipyard.manifest import parse_size as manifest_size


@pytest.mark.parametrize(
    ("text", "size"),
    [("10MB", 10_000_000), ("10M", 10 << 20), ("10MiB", 10 << 20), ("2kb", 2000),
     ("1.5GiB", 1_610_612_736), ("1T", 1 << 40), ("1TB", 10**12), ("7 B", 7)],
)  # fmt: skip
def test_a_size_is_the_same_bytes_everywhere(text: str, size: int) -> None:
    assert parse_size(text) == size
    assert manifest_size(text) == size
    assert cache_size(text, "--max-size") == size
    assert cache_limit({"SHIPYARD_CACHE_MAX_SIZE": text}) == size


def test_bytes_alone_are_a_size_only_where_bare_numbers_are_allowed() -> None:
    assert cache_size("512", "--max-size") == 512
    with pytest.raises(ValueError, match="write a size such as 40MB"):
        manifest_size("512")
    with pytest.raises(UsageError, match=r"--max-size=10 parsecs: give bytes"):
        cache_size("10 parsecs", "--max-size")
