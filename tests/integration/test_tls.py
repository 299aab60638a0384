"""Transport security: TLS is verified by default, plain HTTP only where it cannot leak.

A CNCF distribution registry serves TLS on loopback with a certificate from a CA
made here. Without that CA the client fails, never falls back to plain HTTP, and
the message names the setting that trusts the CA; with the CA configured in any
of the ways the message names, it works. Plain HTTP to a host off loopback is
refused before any connection is made unless explicitly allowed.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.errors import UsageError
from shipyard.oci.remote.registry import CertificateError, Registry, RegistryError
from shipyard.oci.remote.transport import ca_variable_name
from shipyard.release.index import PackageIndex, index_from_env
from tests.integration.conftest import Services, require_services
from tests.integration.registries import (
    ExtraRegistry,
    make_certificates,
    registry_binary,
    running_registry,
)
from tests.reliability import record

pytestmark = [pytest.mark.integration, pytest.mark.reliability]


@pytest.fixture(scope="module")
def tls_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExtraRegistry]:
    if registry_binary() is None:
        reason = "docker-registry is not installed (apt-get install docker-registry)"
        if require_services():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("tls-registry")
    certs = folder / "certs"
    certs.mkdir()
    with running_registry(folder / "registry", tls=make_certificates(certs)) as registry:
        yield registry


def no_config(tmp_path: Path) -> dict[str, str]:
    """A client environment with no credentials, CA settings or insecure hosts."""
    return {"DOCKER_CONFIG": str(tmp_path / "no-docker-config")}


def blob(tmp_path: Path) -> tuple[Path, str, int]:
    path = tmp_path / "blob"
    data = os.urandom(4096)
    path.write_bytes(data)
    return path, "sha256:" + hashlib.sha256(data).hexdigest(), len(data)


def round_trip(registry: Registry, tmp_path: Path, repo: str) -> None:
    """Push a blob and pull it back, checking its bytes."""
    path, digest, size = blob(tmp_path)
    registry.push_blob(repo, digest, size, path)
    back = tmp_path / f"back-{digest[7:15]}"
    assert registry.pull_blob(repo, digest, back, size=size) == size
    assert back.read_bytes() == path.read_bytes()


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_tls_is_verified_and_the_failure_says_how_to_trust_the_ca(
    tls_registry: ExtraRegistry, tmp_path: Path
) -> None:
    host, ca = tls_registry.host, tls_registry.ca_file
    assert ca is not None
    variable = ca_variable_name(host)
    assert variable == "SHIPYARD_REGISTRY_" + host.replace(".", "_").replace(":", "_") + "_CA_FILE"
    refused = 0
    messages = []
    # Without the CA: with and without a scheme (the loopback TLS probe must not
    # fall back to plain HTTP on a certificate it cannot verify).
    for name in (host, f"https://{host}"):
        untrusted = Registry(name, certs_dirs=(), environ=no_config(tmp_path))
        with pytest.raises(CertificateError) as caught:
            untrusted.ping()
        refused += 1
        message = str(caught.value)
        messages.append(message)
        assert caught.value.exit_code == 2
        assert f"the TLS certificate of {host} is not trusted by the default CA bundle" in message
        assert f"set {variable}=/path/to/ca.pem" in message
        assert f"/etc/docker/certs.d/{host}/ca.crt" in message
        assert "ca_file=" in message
        assert untrusted.stats.requests["GET"] <= 2, "no retries of a certificate failure"
    # Another CA is no better; the message names the one that was used.
    other = make_certificates(tmp_path)[0]
    wrong = Registry(host, ca_file=other, certs_dirs=(), environ=no_config(tmp_path))
    with pytest.raises(CertificateError, match=f"not trusted by the CA in {other}"):
        wrong.ping()
    refused += 1

    # Each way the message names works: the variable, certs.d, ca_file=.
    trusted = 0
    with_variable = Registry(
        host, certs_dirs=(), environ={**no_config(tmp_path), variable: str(ca)}
    )
    round_trip(with_variable, tmp_path, "tls/variable")
    trusted += 1
    certs_d = tmp_path / "certs.d"
    (certs_d / host).mkdir(parents=True)
    (certs_d / host / "ca.crt").write_bytes(ca.read_bytes())
    round_trip(
        Registry(host, certs_dirs=(certs_d,), environ=no_config(tmp_path)), tmp_path, "tls/d"
    )
    trusted += 1
    with_file = Registry(f"https://{host}", ca_file=ca, certs_dirs=(), environ=no_config(tmp_path))
    round_trip(with_file, tmp_path, "tls/file")
    trusted += 1
    # The explicit opt-out, as docker's insecure-registries: no verification.
    insecure = Registry(host, insecure=True, certs_dirs=(), environ=no_config(tmp_path))
    round_trip(insecure, tmp_path, "tls/insecure")

    with pytest.raises(UsageError, match=f"{variable}=/nonexistent/ca.pem names no file"):
        Registry(host, environ={variable: "/nonexistent/ca.pem"})
    record(
        "TLS verified by default",
        area="transport",
        cases=refused + trusted + 1,
        injected=f"a loopback registry with a certificate from a private CA; {refused} clients "
        "without that CA (no scheme, https://, another CA), 3 with it",
        result=f"{refused}/{refused} refused with a CertificateError (exit 2) naming {variable}, "
        f"/etc/docker/certs.d/{host}/ca.crt and ca_file=, none fell back to plain HTTP; "
        f"{trusted}/3 ways of adding the CA worked; insecure=True skips verification",
        figures={"refused": refused, "trusted": trusted},
    )


class Dialled(AssertionError):
    """Raised by the patched socket layer: a connection was attempted."""


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Fail any name lookup or connect, and record that it was tried."""
    tried: list[object] = []

    def refuse(*args: object, **kwargs: object) -> object:
        tried.append(args)
        raise Dialled(f"a connection was attempted: {args!r}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return tried


def test_plain_http_off_loopback_is_refused_before_any_connection(
    no_network: list[object],
) -> None:
    host = "registry.example.invalid:5000"
    started = time.monotonic()
    with pytest.raises(UsageError) as caught:
        Registry(f"http://{host}", environ={})
    message = str(caught.value)
    assert caught.value.exit_code == 2
    assert "plain HTTP is only used for loopback hosts" in message
    assert f"SHIPYARD_INSECURE_REGISTRIES={host}" in message and "insecure=True" in message

    with pytest.raises(UsageError) as index_refused:
        index_from_env(
            {
                "SHIPYARD_INDEX_URL": "http://index.example.invalid/",
                "SHIPYARD_INDEX_USER": "u",
                "SHIPYARD_INDEX_PASSWORD": "index-secret",
            }
        )
    assert "SHIPYARD_INDEX_INSECURE=1" in str(index_refused.value)
    assert "index-secret" not in str(index_refused.value)
    with pytest.raises(UsageError, match="in clear"):
        PackageIndex("https://index.example.invalid/", "u", "p", "http://index.example.invalid/s/")

    # Explicitly allowed: accepted, and still nothing dialled until a request is made.
    allowed = Registry(f"http://{host}", environ={"SHIPYARD_INSECURE_REGISTRIES": host})
    assert allowed.insecure
    assert Registry(f"http://{host}", insecure=True, environ={}).insecure
    assert PackageIndex("http://index.example.invalid/", "u", "p", insecure=True).insecure
    # Without a scheme a host off loopback gets https, decided without a probe.
    remote = Registry(host, environ={})
    assert not remote.insecure
    assert remote._url("/v2/") == f"https://{host}/v2/"
    assert no_network == [], "nothing was looked up or dialled"
    record(
        "plain HTTP off loopback",
        area="transport",
        cases=4,
        injected="http:// registry and index URLs on a host off loopback, with the socket "
        "layer patched to fail any lookup or connect",
        result="registry and index refused with a UsageError (exit 2) naming the setting that "
        "allows it, with no lookup or connection; allowed only by insecure=True, "
        "SHIPYARD_INSECURE_REGISTRIES or SHIPYARD_INDEX_INSECURE=1; a bare host gets https",
        figures={"connections_before_refusal": 0, "seconds": round(time.monotonic() - started, 3)},
    )


@pytest.mark.requires("registry")
def test_plain_http_is_used_on_loopback(
    services: Services, tmp_path: Path, tls_registry: ExtraRegistry
) -> None:
    # A bare loopback host is probed for TLS first and falls back to HTTP only when
    # the host does not speak TLS at all.
    plain = Registry(services.registry, environ=no_config(tmp_path))
    plain.ping()
    assert plain.stats.requests["GET"] == 2, "the TLS probe, then the ping over HTTP"
    explicit = Registry(f"http://{services.registry}", environ=no_config(tmp_path))
    explicit.ping()
    assert explicit.stats.requests["GET"] == 1, "http:// on loopback needs no probe"
    # http:// to a registry that speaks only TLS fails; it is not silently upgraded.
    with pytest.raises(RegistryError) as caught:
        Registry(f"http://{tls_registry.host}", environ=no_config(tmp_path)).ping()
    assert not isinstance(caught.value, CertificateError)
    assert "HTTP 400" in str(caught.value) or "no answer" in str(caught.value)
    record(
        "plain HTTP on loopback",
        area="transport",
        cases=3,
        injected="a bare loopback host, http:// on loopback, http:// to a TLS-only registry",
        result="a bare loopback host is probed for TLS and falls back to HTTP only when TLS is "
        "not spoken; http:// on loopback needs no probe; http:// to a TLS registry fails "
        f"rather than being upgraded ({caught.value.detail})",
        figures={"probe_requests": plain.stats.requests["GET"] - 1},
    )
