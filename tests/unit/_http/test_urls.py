"""Which server a URL reaches: read as requests connects, ambiguous hosts refused.

Pinned by the security review of issue 12 (F1): `http://OTHER\\@HUB/...` is host
OTHER to urllib3 and HUB to urlsplit, so the origin is the one requests connects to
and `safe_url` refuses the URL (see test_transport_hostile_registry.py for the client).
"""

from __future__ import annotations

import pytest

from shipyard._http.urls import authority, origin, safe_url


def test_parsers_agree_on_what_safe_url_lets_through() -> None:
    url = "http://127.0.0.3:1\\@127.0.0.2:2/up"
    assert origin(url) == ("http", "127.0.0.3", 1), "the host requests connects to"
    assert authority(url) == "127.0.0.3:1"
    for bad in (url, "http://a%2eb/", "http://reg\t/", "http://\uff52eg/", "http://u:p@reg/"):
        with pytest.raises(ValueError):
            safe_url(bad)
    assert safe_url("http://u:p@reg/x", userinfo=True) == "http://u:p@reg/x"
    assert safe_url("HTTPS://Reg.Example:443/v2/a\\b") == "https://reg.example:443/v2/a%5Cb"
    assert origin("http://[::1]:5000/v2/") == ("http", "[::1]", 5000)
