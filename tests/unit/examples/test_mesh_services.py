"""The examples/mesh services work: mesh-discovery with meshctl, mesh-agent and mesh-echo
are imported from their source trees and exercised over real loopback sockets, with every
server shut down when its test ends; every CLI reports its version."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import yaml

from tests.unit._mesh import (
    TIMEOUT,
    bound_port,
    closed_port,
    expected_version,
    http_json,
    serving,
    spawn,
    terminate,
)

# The examples are not installed in the test environment; import them from their src trees.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples/mesh/agent/src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples/mesh/cni/src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples/mesh/ctl/src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples/mesh/discovery/src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples/mesh/echo/src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples/mesh/libs/api/src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples/mesh/libs/config/src"))

from meshagent import YAML_NATIVE, AgentConfig, AgentConfigError, HealthServer, load_config
from meshagent.main import main as agent_main
from meshcni.main import main as cni_main
from meshctl import DiscoveryClient, DiscoveryRequestError
from meshctl.cli import main as ctl_main
from meshdiscovery import DiscoveryServer
from meshdiscovery.server import main as discovery_main
from meshecho import EchoServer, send
from meshecho.main import main as echo_main


@pytest.fixture
def discovery() -> Iterator[DiscoveryServer]:
    """A mesh-discovery server on a free loopback port."""
    server = DiscoveryServer("127.0.0.1", 0)
    with serving(server):
        yield server


@pytest.fixture
def echo_server() -> Iterator[EchoServer]:
    """A mesh-echo server on a free loopback port."""
    server = EchoServer("127.0.0.1", 0)
    with serving(server):
        yield server


# --- versions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("main", "prog", "dist"),
    [
        (agent_main, "mesh-agent", "mesh-agent"),
        (ctl_main, "meshctl", "meshctl"),
        (discovery_main, "mesh-discovery", "mesh-discovery"),
        (echo_main, "mesh-echo", "mesh-echo"),
        (cni_main, "mesh-cni", "mesh-cni"),
    ],
)
def test_version_flag_prints_console_script_name_and_dist_version(
    main: Callable[[Sequence[str]], int],
    prog: str,
    dist: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"{prog} {expected_version(dist)}\n"


# --- mesh-discovery and meshctl -------------------------------------------------------------


def test_meshctl_registers_lists_and_deregisters(
    discovery: DiscoveryServer, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--discovery", discovery.url]

    assert ctl_main([*base, "register", "web", "10.0.0.7:8080"]) == 0
    assert ctl_main([*base, "register", "api", "10.0.0.9:9090"]) == 0
    assert capsys.readouterr().out == (
        "registered web at 10.0.0.7:8080\nregistered api at 10.0.0.9:9090\n"
    )

    assert ctl_main([*base, "list"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "NAME  ADDRESS",
        "api   10.0.0.9:9090",
        "web   10.0.0.7:8080",
    ]

    assert ctl_main([*base, "deregister", "web"]) == 0
    assert capsys.readouterr().out == "deregistered web\n"
    assert ctl_main([*base, "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"name": "api", "address": "10.0.0.9:9090"}]

    assert ctl_main([*base, "deregister", "web"]) == 1
    assert capsys.readouterr().err == "meshctl: service 'web' is not registered\n"


def test_meshctl_takes_discovery_url_from_environment(
    discovery: DiscoveryServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    discovery.registry.register("db", "10.0.0.5:5432")
    monkeypatch.setenv("MESH_DISCOVERY", discovery.url)

    assert ctl_main(["list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"name": "db", "address": "10.0.0.5:5432"}]


def test_meshctl_reports_unreachable_discovery_and_exits_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"http://127.0.0.1:{closed_port()}"

    assert ctl_main(["--discovery", url, "list"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"meshctl: cannot reach mesh-discovery at {url} (")
    assert "Traceback" not in captured.err


def test_discovery_client_sends_awkward_names_intact_for_server_validation(
    discovery: DiscoveryServer,
) -> None:
    client = DiscoveryClient(discovery.url)

    with pytest.raises(DiscoveryRequestError) as refused:
        client.register("a/b", "10.0.0.1:80")
    assert refused.value.status == 400
    assert "invalid service name 'a/b'" in str(refused.value)
    assert client.services() == []


def test_discovery_put_creates_then_replaces(discovery: DiscoveryServer) -> None:
    port = bound_port(discovery)

    assert http_json(port, "PUT", "/v1/services/web", b'{"address": "10.0.0.1:80"}') == (
        201,
        {"name": "web", "address": "10.0.0.1:80"},
    )
    assert http_json(port, "PUT", "/v1/services/web", b'{"address": "10.0.0.2:80"}')[0] == 200
    assert http_json(port, "GET", "/v1/services/web") == (
        200,
        {"name": "web", "address": "10.0.0.2:80"},
    )
    assert http_json(port, "GET", "/healthz") == (200, {"status": "ok"})


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "message"),
    [
        ("PUT", "/v1/services/web", b"{not json", 400, "invalid JSON body"),
        ("PUT", "/v1/services/web", b'["10.0.0.1:80"]', 400, "body must be a JSON object"),
        ("PUT", "/v1/services/web", b'{"addr": "10.0.0.1:80"}', 400, "'address' must be"),
        ("PUT", "/v1/services/web", b'{"address": "a b"}', 400, "invalid address 'a b'"),
        ("PUT", "/v1/services/Web_1", b'{"address": "10.0.0.1:80"}', 400, "invalid service name"),
        ("PUT", "/v1/services/web", None, 411, "Content-Length"),
        ("DELETE", "/v1/services/ghost", None, 404, "service 'ghost' is not registered"),
        ("GET", "/v1/elsewhere", None, 404, "no route for /v1/elsewhere"),
    ],
)
def test_discovery_rejects_bad_requests_with_a_message(
    discovery: DiscoveryServer,
    method: str,
    path: str,
    body: bytes | None,
    status: int,
    message: str,
) -> None:
    got_status, payload = http_json(bound_port(discovery), method, path, body)

    assert got_status == status
    assert message in payload["error"]
    assert discovery.registry.services() == []


# --- mesh-agent -----------------------------------------------------------------------------


def test_agent_reports_health_and_readiness_over_http() -> None:
    server = HealthServer("127.0.0.1", 0, {"status": "ok", "version": "9.9.9", "yaml_native": True})
    with serving(server):
        port = bound_port(server)
        assert http_json(port, "GET", "/healthz") == (
            200,
            {"status": "ok", "version": "9.9.9", "yaml_native": True},
        )
        assert http_json(port, "GET", "/readyz") == (503, {"ready": False})
        server.ready.set()
        assert http_json(port, "GET", "/readyz") == (200, {"ready": True})


def test_agent_once_prints_health_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert agent_main(["--once"]) == 0

    assert json.loads(capsys.readouterr().out) == {
        "status": "ok",
        "version": expected_version("mesh-agent"),
        "yaml_native": YAML_NATIVE,
    }


def test_agent_uses_libyaml_loader_exactly_when_pyyaml_has_it() -> None:
    assert YAML_NATIVE is yaml.__with_libyaml__


def test_agent_config_sets_host_and_port(tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text("host: 127.0.0.1\nport: 0\n")

    assert load_config(config) == AgentConfig(host="127.0.0.1", port=0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("port: yes\n", "'port' must be an integer 0-65535, got True"),
        ("port: 70000\n", "'port' must be an integer 0-65535, got 70000"),
        ("hots: 127.0.0.1\n", "unknown setting(s) hots"),
        ("- port\n", "expected a mapping of settings, got list"),
        ("port: [\n", "is not valid YAML"),
    ],
)
def test_agent_rejects_bad_config_with_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(text)

    with pytest.raises(AgentConfigError) as error:
        load_config(config)
    assert message in str(error.value)
    assert agent_main(["--config", str(config), "--once"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("mesh-agent: ")
    assert message in captured.err


def test_agent_process_serves_probes_and_exits_0_on_sigterm() -> None:
    agent = spawn("meshagent.main", "--port", "0")
    try:
        assert agent.stdout is not None
        banner = agent.stdout.readline()
        assert banner.startswith("mesh-agent serving probes on http://127.0.0.1:"), banner
        port = int(banner.rsplit(":", 1)[1])
        # The socket listens before the agent reports ready (the banner comes
        # first), so a probe may see 503 for a moment: poll, as a kubelet does.
        deadline = time.monotonic() + 10
        answers = [http_json(port, "GET", "/readyz")]
        while answers[-1] != (200, {"ready": True}) and time.monotonic() < deadline:
            assert answers[-1] == (503, {"ready": False}), answers
            time.sleep(0.05)
            answers.append(http_json(port, "GET", "/readyz"))
        assert answers[-1] == (200, {"ready": True}), answers
        assert http_json(port, "GET", "/healthz")[1]["status"] == "ok"

        returncode, stderr = terminate(agent)
        assert (returncode, stderr) == (0, "")
    finally:
        if agent.poll() is None:  # only when an assertion failed before it was stopped
            agent.kill()
            agent.communicate()


# --- mesh-echo ------------------------------------------------------------------------------


@pytest.mark.parametrize("message", ["hello mesh", "ünïcödé ✓", "x" * 100_000])
def test_echo_round_trip(echo_server: EchoServer, message: str) -> None:
    assert send(message, "127.0.0.1", echo_server.port, timeout=TIMEOUT) == message


def test_echo_send_cli_prints_reply_and_exits_0(
    echo_server: EchoServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert echo_main(["send", "ping", "--port", str(echo_server.port)]) == 0
    assert capsys.readouterr().out == "ping\n"


def test_echo_send_exits_1_when_the_reply_differs(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def answer_wrongly() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(1024)
                connection.sendall(b"pong")

        impostor = threading.Thread(target=answer_wrongly)
        impostor.start()
        assert echo_main(["send", "ping", "--port", str(bound_port(listener))]) == 1
        impostor.join(TIMEOUT)

    captured = capsys.readouterr()
    assert captured.out == "pong\n"
    assert "reply differs" in captured.err


def test_echo_send_exits_1_when_nothing_listens(capsys: pytest.CaptureFixture[str]) -> None:
    assert echo_main(["send", "ping", "--port", str(closed_port())]) == 1
    assert capsys.readouterr().err.startswith("mesh-echo: echo exchange with 127.0.0.1:")


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_echo_rejects_a_bad_port_as_a_usage_error(
    port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        echo_main(["send", "ping", "--port", port])
    assert exit_info.value.code == 2
    assert f"port must be an integer 0-65535, not '{port}'" in capsys.readouterr().err


def test_echo_serve_prints_port_then_echoes_until_sigterm() -> None:
    server = spawn("meshecho.main", "serve", "--port", "0")
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        assert send("over a real process", "127.0.0.1", port, timeout=TIMEOUT) == (
            "over a real process"
        )

        assert terminate(server) == (0, "")
    finally:
        if server.poll() is None:  # only when an assertion failed before it was stopped
            server.kill()
            server.communicate()


def test_meshctl_toml_without_its_extra_exits_2_naming_it(
    discovery: DiscoveryServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `pip install meshctl` leaves the `toml` extra out: --toml says how to get it.
    monkeypatch.setitem(sys.modules, "tomli_w", None)  # an import of it fails

    assert ctl_main(["--discovery", discovery.url, "list", "--toml"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "meshctl: --toml needs the toml extra: pip install 'meshctl[toml]'\n"
