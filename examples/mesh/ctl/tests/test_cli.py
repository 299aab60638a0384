"""meshctl's command line, with the discovery client replaced: no sockets are opened."""

import json
import sys
from typing import ClassVar

import pytest
from meshapi import DiscoveryClient, DiscoveryRequestError, DiscoveryUnreachableError, Service
from meshctl import cli
from meshctl.cli import DEFAULT_DISCOVERY, main


class _FakeClient:
    """Stands in for meshapi.DiscoveryClient, holding services in a dict."""

    instances: ClassVar[list["_FakeClient"]] = []
    services_by_name: ClassVar[dict[str, str]] = {}
    unreachable: ClassVar[bool] = False

    def __init__(self, base_url: str, timeout: float = 5.0) -> None:
        self.base_url = base_url
        self.timeout = timeout
        _FakeClient.instances.append(self)

    def _check(self) -> None:
        if self.unreachable:
            raise DiscoveryUnreachableError(self.base_url, "connection refused")

    def register(self, name: str, address: str) -> Service:
        self._check()
        self.services_by_name[name] = address
        return Service(name, address)

    def services(self) -> list[Service]:
        self._check()
        return [Service(name, addr) for name, addr in sorted(self.services_by_name.items())]

    def deregister(self, name: str) -> None:
        self._check()
        if self.services_by_name.pop(name, None) is None:
            raise DiscoveryRequestError(404, f"service {name!r} is not registered")


@pytest.fixture(autouse=True)
def fake_client(monkeypatch: pytest.MonkeyPatch) -> type[_FakeClient]:
    monkeypatch.setattr(_FakeClient, "instances", [])
    monkeypatch.setattr(_FakeClient, "services_by_name", {})
    monkeypatch.setattr(_FakeClient, "unreachable", False)
    monkeypatch.setattr(cli, "DiscoveryClient", _FakeClient)
    monkeypatch.delenv("MESH_DISCOVERY", raising=False)
    return _FakeClient


def test_register_then_list_as_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["register", "web", "10.0.0.7:8080"]) == 0
    assert main(["register", "database", "10.0.0.9:5432"]) == 0
    assert main(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "registered web at 10.0.0.7:8080",
        "registered database at 10.0.0.9:5432",
        "NAME      ADDRESS",
        "database  10.0.0.9:5432",
        "web       10.0.0.7:8080",
    ]


def test_list_json_and_empty_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    assert capsys.readouterr().err == "no services registered\n"
    main(["register", "web", "10.0.0.7:8080"])
    capsys.readouterr()
    assert main(["list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"name": "web", "address": "10.0.0.7:8080"}]


def test_discovery_url_comes_from_flag_env_or_default(
    fake_client: type[_FakeClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    main(["list"])
    monkeypatch.setenv("MESH_DISCOVERY", "http://127.0.0.1:9999")
    main(["--timeout", "2.5", "list"])
    main(["--discovery", "http://127.0.0.1:1234", "list"])
    monkeypatch.setenv("MESH_DISCOVERY", "")
    main(["list"])
    assert [(c.base_url, c.timeout) for c in fake_client.instances] == [
        (DEFAULT_DISCOVERY, 5.0),
        ("http://127.0.0.1:9999", 2.5),
        ("http://127.0.0.1:1234", 5.0),
        (DEFAULT_DISCOVERY, 5.0),
    ]
    assert DEFAULT_DISCOVERY == "http://127.0.0.1:15010"


def test_discovery_errors_exit_1_with_the_message(
    fake_client: type[_FakeClient], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["deregister", "ghost"]) == 1
    assert capsys.readouterr().err == "meshctl: service 'ghost' is not registered\n"
    fake_client.unreachable = True
    assert main(["list"]) == 1
    assert "cannot reach mesh-discovery at" in capsys.readouterr().err


def test_a_discovery_url_that_is_not_http_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "DiscoveryClient", DiscoveryClient)  # the real one; it fails early
    assert main(["--discovery", "ftp://127.0.0.1:15010", "list"]) == 1
    assert "must start with http:// or https://" in capsys.readouterr().err


def test_deregister_prints_the_name(capsys: pytest.CaptureFixture[str]) -> None:
    main(["register", "web", "10.0.0.7:8080"])
    assert main(["deregister", "web"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "deregistered web"


def test_toml_without_the_extra_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "tomli_w", None)  # makes `import tomli_w` fail
    assert main(["list", "--toml"]) == 2
    assert "--toml needs the toml extra" in capsys.readouterr().err


@pytest.mark.parametrize("timeout", ["0", "-1", "inf", "nan", "soon"])
def test_timeout_must_be_a_positive_number(
    timeout: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--timeout", timeout, "list"])
    assert exit_info.value.code == 2
    assert "expected a positive number of seconds" in capsys.readouterr().err
