"""What the environment sets for HTTP: the time to wait for an answer."""

from __future__ import annotations

import pytest

from shipyard._http.settings import http_timeout
from shipyard.errors import UsageError


def test_http_timeout_from_the_environment() -> None:
    assert http_timeout({}) == (10.0, 120.0)
    assert http_timeout({"SHIPYARD_HTTP_TIMEOUT": "2.5"}) == (2.5, 2.5)
    assert http_timeout({"SHIPYARD_HTTP_TIMEOUT": " 300 "}) == (10.0, 300.0)
    for junk in ("0", "-1", "soon", "nan", "1e9"):
        with pytest.raises(UsageError, match="SHIPYARD_HTTP_TIMEOUT"):
            http_timeout({"SHIPYARD_HTTP_TIMEOUT": junk})
