"""Which server a URL reaches, read exactly as the HTTP library reads it to connect.

A URL's scope (its origin, what credentials and the plain-HTTP rule are decided
on) is read the way requests and urllib3 read it to connect (`origin`,
`authority`), never by another parser, and a URL whose host part two URL parsers
could read differently (a backslash, a percent sign, white space, non-ASCII, or a
`user@` a server named) is refused before any connection (`safe_url`).
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

import requests
from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

__all__ = ["authority", "is_loopback", "origin", "safe_url"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
# White space and control characters: URL parsers strip, keep or reject them differently.
_BLANKS = re.compile(r"[\x00-\x20\x7f]")


def is_loopback(host: str) -> bool:
    """True for `localhost`, 127.0.0.0/8 and ::1, with or without a port."""
    if host.startswith("["):
        name = host[1 : host.find("]")]
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    name = name.split("%", 1)[0]
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _prepared(url: str) -> str | None:
    """`url` as requests sends it (scheme and host lower-cased, IDNA, path quoted), or None."""
    try:
        return requests.Request("GET", url).prepare().url
    except (requests.RequestException, LocationParseError, ValueError, UnicodeError):
        return None


def _target(url: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port as written) that requests and urllib3 connect to for `url`."""
    prepared = _prepared(url)
    if prepared is None:
        return None
    try:
        parts = parse_url(prepared)
    except LocationParseError:
        return None
    if not parts.host:
        return None
    return (parts.scheme or "").lower(), parts.host.lower(), parts.port


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) that `url` connects to, the port filled in: a credential's scope.

    Read as requests and urllib3 read the URL to connect, never by another parser.
    A URL they cannot send matches no origin.
    """
    found = _target(url)
    if found is None:
        return "", "", -1
    scheme, host, port = found
    return scheme, host, port or _DEFAULT_PORTS.get(scheme)


def authority(url: str) -> str:
    """`host:port` that `url` connects to (as written, without `user:password@`), lower-cased."""
    found = _target(url)
    if found is None:
        return urlsplit(url).netloc.rpartition("@")[2].lower()
    _, host, port = found
    return host if port is None else f"{host}:{port}"


def safe_url(url: str, *, userinfo: bool = False) -> str:
    """`url` as requests will send it; ValueError (saying why) when its host is ambiguous.

    Refused: white space or control characters anywhere; a host part with a
    backslash (`http://EVIL\\@REG/` is host EVIL to urllib3, REG to urlsplit), a
    percent sign or non-ASCII; `user@` unless `userinfo` (a URL a server named
    never needs one); and any URL on which urlsplit and urllib3 still disagree.
    """
    if _BLANKS.search(url):
        raise ValueError("it contains white space or control characters")
    try:
        split = urlsplit(url)
        netloc = split.netloc
    except ValueError as exc:
        raise ValueError(f"its host part is malformed ({exc})") from None
    host = netloc.rpartition("@")[2]
    if "\\" in netloc or "%" in netloc or not netloc.isascii():
        if "\\" in netloc:
            read = urlsplit(url.replace("\\", "/")).netloc.rpartition("@")[2]
            host = f"{read} to the HTTP library, {host} to other parsers"
        raise ValueError(
            f"its host part can be read as more than one host ({host}): a backslash, a "
            "percent sign or a non-ASCII character is not allowed there"
        )
    if "@" in netloc and not userinfo:
        raise ValueError(f"it names a user name or password for {host} (user@host)")
    prepared = _prepared(url)
    found = _target(url)
    if prepared is None or found is None:
        raise ValueError("it is not a URL the HTTP client can send")
    again = urlsplit(prepared)
    try:
        split_port = again.port
    except ValueError:
        split_port = -1
    if ((again.hostname or "").lower(), split_port) != (found[1].strip("[]"), found[2]):
        raise ValueError(f"its host part can be read as more than one host ({found[1]})")
    return prepared
