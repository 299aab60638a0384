"""--cache=URL parsing and the connection the environment describes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from shipyard.engine.cache.endpoint import CacheEndpoint, Connection, open_remote, parse_endpoint
from shipyard.errors import UsageError


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("oci://127.0.0.1:5000/team/cache", ("oci", "127.0.0.1:5000", "team/cache", False)),
        ("http://127.0.0.1:8080", ("http", "127.0.0.1:8080", "", False)),
        ("https://cache.example/ci/", ("https", "cache.example", "ci", True)),
        ("grpc://127.0.0.1:50051/main", ("grpc", "127.0.0.1:50051", "main", False)),
        ("grpcs://remote.example:443", ("grpcs", "remote.example:443", "", True)),
    ],
)
def test_each_protocol_parses(url: str, expected: tuple[str, str, str, bool]) -> None:
    endpoint = parse_endpoint(url)
    assert endpoint == CacheEndpoint(expected[0], expected[1], expected[2], url)
    assert endpoint.tls is expected[3]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://x/y", "oci://HOST"),
        ("127.0.0.1:5000/cache", "grpc[s]://"),
        ("oci://127.0.0.1:5000", "REPOSITORY"),
        ("https://user:secret@cache.example/", "never in the URL"),
        ("grpc://", "grpc[s]://"),
    ],
)
def test_a_bad_url_names_the_flag_and_the_forms(url: str, message: str) -> None:
    with pytest.raises(UsageError, match=r"--cache=") as caught:
        parse_endpoint(url)
    assert message in str(caught.value)


def test_secrets_and_tls_files_come_from_the_environment(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    connection = Connection.from_env(
        {
            "SHIPYARD_CACHE_TOKEN": "t0k",
            "SHIPYARD_CACHE_HEADERS": "X-Api-Key=abc, x-other=1",
            "SHIPYARD_CACHE_USER": "ci",
            "SHIPYARD_CACHE_PASSWORD": "pw",
            "SHIPYARD_CACHE_CA": str(ca),
            "SHIPYARD_CACHE_TIMEOUT": "2.5",
            "SHIPYARD_CACHE_RETRIES": "0",
        }
    )
    assert connection.headers == (
        ("x-api-key", "abc"),
        ("x-other", "1"),
        ("authorization", "Bearer t0k"),
    )
    assert connection.basic == ("ci", "pw")
    assert connection.ca_file == ca and connection.cert_file is None
    assert (connection.timeout, connection.retries) == (2.5, 0)
    assert Connection.from_env({}) == Connection()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SHIPYARD_CACHE_HEADERS", "novalue", "is not NAME=VALUE"),
        ("SHIPYARD_CACHE_CA", "/nonexistent/ca.pem", "names no file"),
        ("SHIPYARD_CACHE_TIMEOUT", "0", "positive number"),
        ("SHIPYARD_CACHE_RETRIES", "-1", "positive number"),
        ("SHIPYARD_CACHE_RETRIES", "two", "positive number"),
    ],
)
def test_a_bad_variable_is_named(variable: str, value: str, message: str) -> None:
    with pytest.raises(UsageError, match=variable) as caught:
        Connection.from_env({variable: value})
    assert message in str(caught.value)


@pytest.mark.parametrize("url", ["grpc://127.0.0.1:1/main", "http://127.0.0.1:1/cache"])
def test_without_the_remote_extra_a_cache_url_says_what_to_install(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gRPC client and the HTTP one (whose /ac/ entries are protobuf) need the
    `remote` extra: without it, exit 2 and the install command, no traceback."""
    for name in list(sys.modules):
        if name.startswith(
            ("buildgrid", "shipyard.engine.cache.reapi.", "shipyard.engine.cache.http")
        ):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "buildgrid", None)  # as if not installed
    with pytest.raises(UsageError, match=r"pip install 'shipyard\[remote\]'") as caught:
        open_remote(parse_endpoint(url), Connection())
    assert caught.value.exit_code == 2 and f"--cache={url}" in str(caught.value)


def test_the_connect_timeout_comes_from_the_environment_and_a_bad_one_is_named() -> None:
    assert Connection.from_env({}).connect_timeout == 5.0
    assert Connection.from_env({"SHIPYARD_CACHE_CONNECT_TIMEOUT": "1.5"}).connect_timeout == 1.5
    with pytest.raises(UsageError, match="SHIPYARD_CACHE_CONNECT_TIMEOUT"):
        Connection.from_env({"SHIPYARD_CACHE_CONNECT_TIMEOUT": "0"})


def test_an_oci_url_opens_the_registry_cache_with_the_connection_and_env() -> None:
    """One path for every protocol: open_remote builds the registry client too, with
    the cache's credentials and the environment it was given (nothing is sent)."""
    from shipyard.engine.cache.remote import RemoteCache

    env = {"SHIPYARD_CACHE_USER": "ci", "SHIPYARD_CACHE_PASSWORD": "pw", "DOCKER_CONFIG": "/x"}
    cache = open_remote(
        parse_endpoint("oci://127.0.0.1:5000/team/cache"), Connection.from_env(env), env
    )
    assert isinstance(cache, RemoteCache)
    assert (cache.registry.host, cache.repository) == ("127.0.0.1:5000", "team/cache")
    assert cache.stats.calls == 0
