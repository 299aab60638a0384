"""Image references: the OCI grammar, canonical text, and errors that name the bad part."""

from __future__ import annotations

import pytest

from shipyard.errors import UsageError
from shipyard.oci.remote.reference import (
    InvalidReference,
    Reference,
    is_digest,
    parse_reference,
    validate_digest,
    validate_host,
    validate_repository,
    validate_tag,
)

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest"),
    [
        ("127.0.0.1:5000/mesh/meshctl", "127.0.0.1:5000", "mesh/meshctl", None, None),
        ("127.0.0.1:5000/mesh/meshctl:1.4.0", "127.0.0.1:5000", "mesh/meshctl", "1.4.0", None),
        (f"localhost/app@{DIGEST}", "localhost", "app", None, DIGEST),
        (f"localhost:5000/a/b:v1@{DIGEST}", "localhost:5000", "a/b", "v1", DIGEST),
        (
            "registry.test/team/app__x.y-z:Latest_1",
            "registry.test",
            "team/app__x.y-z",
            "Latest_1",
            None,
        ),
        ("[::1]:5000/app:dev", "[::1]:5000", "app", "dev", None),
        ("my-host.test:443/a--b/c", "my-host.test:443", "a--b/c", None, None),
    ],
)
def test_parse_valid_references(
    text: str, registry: str, repository: str, tag: str | None, digest: str | None
) -> None:
    ref = parse_reference(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (
        registry,
        repository,
        tag,
        digest,
    )
    assert str(ref) == text
    assert parse_reference(str(ref)) == ref


def test_identifier_name_and_replacements() -> None:
    ref = parse_reference("127.0.0.1:5000/mesh/app")
    assert ref.identifier == "latest"
    assert ref.name == "127.0.0.1:5000/mesh/app"
    tagged = ref.with_tag("1.0")
    assert tagged.identifier == "1.0"
    pinned = tagged.with_digest(DIGEST)
    assert pinned.identifier == DIGEST
    assert str(pinned) == f"127.0.0.1:5000/mesh/app:1.0@{DIGEST}"


@pytest.mark.parametrize(
    ("text", "part"),
    [
        ("x; rm -rf /", "repository component 'x; rm -rf '"),
        ("127.0.0.1:5000/Mesh/app", "repository component 'Mesh'"),
        ("127.0.0.1:5000/mesh//app", "repository component ''"),
        ("127.0.0.1:5000/mesh/app-", "repository component 'app-'"),
        ("127.0.0.1:5000/app:-bad", "tag '-bad'"),
        ("127.0.0.1:5000/app:" + "t" * 129, "tag 'ttt"),
        ("127.0.0.1:5000/app@sha256:abc", "digest 'sha256:abc'"),
        ("127.0.0.1:5000/app@md5:" + "a" * 32, "digest 'md5:"),
        ("127.0.0.1:5000/app@sha256:" + "A" * 64, "digest 'sha256:AAA"),
        ("ubuntu:22.04", "registry host"),
        ("mesh/app", "registry host"),
        ("bad_host.test/app", "registry host 'bad_host.test'"),
        ("-host.test/app", "registry host '-host.test'"),
        ("127.0.0.1:5000/$(reboot)", "repository component '$(reboot)'"),
        ("127.0.0.1:5000/a?b=c", "repository component 'a?b=c'"),
        (" 127.0.0.1:5000/app", "reference"),
        ("", "reference"),
    ],
)
def test_invalid_references_name_the_bad_part(text: str, part: str) -> None:
    with pytest.raises(InvalidReference) as caught:
        parse_reference(text)
    assert part in caught.value.part
    assert f"invalid image reference {text!r}" in str(caught.value)
    assert isinstance(caught.value, UsageError) and isinstance(caught.value, ValueError)
    assert caught.value.exit_code == 2


def test_missing_host_error_shows_the_fix() -> None:
    with pytest.raises(InvalidReference, match=r"e\.g\. 127\.0\.0\.1:5000/mesh/app"):
        parse_reference("mesh/app:1.0")


def test_repository_length_is_bounded() -> None:
    validate_repository("a/" * 126 + "b")  # 253 characters
    with pytest.raises(InvalidReference, match="longer than 255"):
        validate_repository("a/" * 128 + "b")


def test_reference_constructor_validates() -> None:
    with pytest.raises(InvalidReference, match="repository component 'UP'"):
        Reference("127.0.0.1:5000", "UP")
    with pytest.raises(InvalidReference, match="registry host"):
        Reference("no host", "app")


def test_small_validators() -> None:
    assert is_digest(DIGEST)
    assert is_digest("sha512:" + "0" * 128)
    assert not is_digest("sha256:" + "0" * 63)
    assert not is_digest("latest")
    assert validate_digest(DIGEST) == DIGEST
    assert validate_tag("v1.0_rc-2") == "v1.0_rc-2"
    assert validate_host("localhost:5000") == "localhost:5000"
    for bad in ("a b", "host:port", "host/"):
        with pytest.raises(InvalidReference):
            validate_host(bad)
    with pytest.raises(InvalidReference):
        validate_tag(".hidden")
