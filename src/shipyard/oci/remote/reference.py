"""Image references: `host[:port]/repo/path[:tag][@sha256:hex]`, checked against the OCI grammar.

A reference always names its registry host: shipyard has no implicit default
registry, so `ubuntu:22.04` is refused with a message asking for the host. The
host is recognised the way docker does it: the first path component contains a
dot or a colon, is `localhost`, or is a bracketed IPv6 address.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shipyard.errors import UsageError

__all__ = [
    "COMPONENT",
    "HOST",
    "MAX_NAME",
    "TAG",
    "InvalidReference",
    "Reference",
    "is_digest",
    "parse_reference",
    "validate_digest",
    "validate_host",
    "validate_repository",
    "validate_tag",
]

# The grammar of the OCI distribution spec (and distribution/reference): the one
# definition, which the manifest's validation uses too.
COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
TAG = re.compile(r"[\w][\w.-]{0,127}", re.ASCII)
_DOMAIN_LABEL = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
HOST = re.compile(
    rf"(?:{_DOMAIN_LABEL}(?:\.{_DOMAIN_LABEL})*|\[[0-9a-fA-F:.]+(?:%[\w.-]+)?\])(?::[0-9]{{1,5}})?"
)
_DIGESTS = {"sha256": re.compile(r"[a-f0-9]{64}"), "sha512": re.compile(r"[a-f0-9]{128}")}
MAX_NAME = 255


class InvalidReference(UsageError, ValueError):
    """An image reference, repository, tag or digest does not follow the OCI grammar (exit 2)."""

    def __init__(self, text: str, part: str, reason: str) -> None:
        # Here, not at the top: `shipyard check` parses image.base with this module and
        # needs none of the credential code.
        from shipyard.oci.remote.auth import redact

        # What the user wrote may hold a password (`user:pass@host`): never echo it.
        self.text = redact(text)
        self.part = redact(part)
        super().__init__(f"invalid image reference {self.text!r}: {self.part}: {redact(reason)}")


def validate_repository(repository: str, *, text: str | None = None) -> str:
    """Return `repository` if it is a valid repository path (`a/b/c`), else raise."""
    whole = repository if text is None else text
    if not repository:
        raise InvalidReference(whole, "repository", "is empty")
    if len(repository) > MAX_NAME:
        raise InvalidReference(whole, "repository", f"is longer than {MAX_NAME} characters")
    for component in repository.split("/"):
        if not COMPONENT.fullmatch(component):
            raise InvalidReference(
                whole,
                f"repository component {component!r}",
                "must be lower-case letters and digits, separated by '.', '_', '__' or '-'",
            )
    return repository


def validate_host(host: str) -> str:
    """Return `host` if it is a valid registry `host[:port]` (DNS name, IPv4 or [IPv6])."""
    if not HOST.fullmatch(host):
        raise InvalidReference(host, f"registry host {host!r}", "is not a host[:port]")
    return host


def validate_tag(tag: str, *, text: str | None = None) -> str:
    """Return `tag` if it is a valid tag (`[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`)."""
    if not TAG.fullmatch(tag):
        raise InvalidReference(
            tag if text is None else text,
            f"tag {tag!r}",
            "must be 1-128 letters, digits, '_', '.' or '-', not starting with '.' or '-'",
        )
    return tag


def is_digest(value: str) -> bool:
    """True if `value` is a digest shipyard accepts (`sha256:` + 64 or `sha512:` + 128 hex)."""
    algorithm, sep, hexpart = value.partition(":")
    pattern = _DIGESTS.get(algorithm)
    return bool(sep) and pattern is not None and pattern.fullmatch(hexpart) is not None


def validate_digest(digest: str, *, text: str | None = None) -> str:
    """Return `digest` if `is_digest(digest)`, else raise InvalidReference."""
    if not is_digest(digest):
        raise InvalidReference(
            digest if text is None else text,
            f"digest {digest!r}",
            "must be sha256:<64 lower-case hex> or sha512:<128 lower-case hex>",
        )
    return digest


@dataclass(frozen=True)
class Reference:
    """A parsed image reference; `str()` gives back the canonical text."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    def __post_init__(self) -> None:
        text = self._format()
        if not HOST.fullmatch(self.registry):
            raise InvalidReference(text, f"registry host {self.registry!r}", "is not a host[:port]")
        validate_repository(self.repository, text=text)
        if self.tag is not None:
            validate_tag(self.tag, text=text)
        if self.digest is not None:
            validate_digest(self.digest, text=text)

    def _format(self) -> str:
        text = f"{self.registry}/{self.repository}"
        if self.tag is not None:
            text += f":{self.tag}"
        if self.digest is not None:
            text += f"@{self.digest}"
        return text

    def __str__(self) -> str:
        return self._format()

    @property
    def name(self) -> str:
        """`registry/repository`, without tag or digest."""
        return f"{self.registry}/{self.repository}"

    @property
    def identifier(self) -> str:
        """What to ask the registry for: the digest if any, else the tag, else `latest`."""
        return self.digest or self.tag or "latest"

    def with_tag(self, tag: str) -> Reference:
        """The same repository with `tag` and no digest."""
        return Reference(self.registry, self.repository, tag=tag)

    def with_digest(self, digest: str) -> Reference:
        """The same repository pinned to `digest` (the tag is kept for readability)."""
        return Reference(self.registry, self.repository, tag=self.tag, digest=digest)


def _looks_like_host(component: str) -> bool:
    return (
        "." in component
        or ":" in component
        or component == "localhost"
        or (component.startswith("["))
    )


def parse_reference(text: str) -> Reference:
    """Parse `host[:port]/repo/path[:tag][@digest]`; raise InvalidReference naming the bad part."""
    if not text or text != text.strip():
        raise InvalidReference(text, "reference", "is empty or has surrounding white space")
    rest, at, digest = text.partition("@")
    if at:
        validate_digest(digest, text=text)
    tag: str | None = None
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        rest, tag = rest[:colon], rest[colon + 1 :]
        validate_tag(tag, text=text)
    host, slash_found, repository = rest.partition("/")
    if not slash_found or not _looks_like_host(host):
        # Check the would-be repository first so that `x; rm -rf /` is named as such.
        validate_repository(rest, text=text)
        raise InvalidReference(
            text,
            "registry host",
            "is missing; write it in full, e.g. 127.0.0.1:5000/" + rest,
        )
    if not HOST.fullmatch(host):
        raise InvalidReference(text, f"registry host {host!r}", "is not a host[:port]")
    validate_repository(repository, text=text)
    return Reference(host, repository, tag=tag, digest=digest or None)
