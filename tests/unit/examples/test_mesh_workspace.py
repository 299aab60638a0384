"""The example suite is a uv workspace: mesh-api and mesh-config are in-repo libraries that
the apps really use. The engine sees them (discovery, closures, one wheel action each), and
the code that moved from the apps into the libraries still works, run here from source."""

from __future__ import annotations

import json
import sys
import tomllib
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from shipyard.cli import main as shipyard_main
from shipyard.workspace import load_workspace
from tests.unit._mesh import MESH, closed_port, expected_version, serving

# The examples are not installed in the test environment; import them from their src trees.
sys.path.insert(0, str(MESH / "libs/api" / "src"))
sys.path.insert(0, str(MESH / "libs/config" / "src"))
sys.path.insert(0, str(MESH / "ctl" / "src"))
sys.path.insert(0, str(MESH / "discovery" / "src"))
sys.path.insert(0, str(MESH / "agent" / "src"))

import meshapi
import meshconfig
from meshagent.main import main as agent_main
from meshapi import (
    DiscoveryClient,
    DiscoveryProtocolError,
    DiscoveryRequestError,
    DiscoveryUnreachableError,
    InvalidServiceError,
    Service,
)
from meshconfig import AgentConfig, ConfigError, load_agent_config, load_yaml
from meshctl.cli import main as ctl_main
from meshdiscovery import DiscoveryServer, Registry
from meshdiscovery.server import main as discovery_main

REPO = MESH.parents[1]
LIBRARIES = {"mesh-api": "examples/mesh/libs/api", "mesh-config": "examples/mesh/libs/config"}


@pytest.fixture
def discovery() -> Iterator[DiscoveryServer]:
    """A mesh-discovery server on a free loopback port."""
    server = DiscoveryServer("127.0.0.1", 0)
    with serving(server):
        yield server


# --- the workspace as the engine sees it ----------------------------------------------------


def test_the_repository_is_a_uv_workspace_holding_both_libraries() -> None:
    workspace = load_workspace(REPO)

    for name, folder in LIBRARIES.items():
        project = workspace.projects[name]
        assert project.root == REPO / folder
        assert name in workspace.members
    # The root stays shipyard's project; the examples are members, not the root.
    assert workspace.project_at(REPO) is workspace.projects["shipyard"]
    assert {"meshctl", "mesh-discovery", "mesh-agent"} <= set(workspace.members)


@pytest.mark.parametrize(
    ("binary_project", "libraries"),
    [
        ("meshctl", ("mesh-api",)),
        ("mesh-discovery", ("mesh-api",)),
        ("mesh-agent", ("mesh-config",)),
        ("mesh-echo", ()),
        ("mesh-cni", ()),
        ("shipyard", ()),
    ],
)
def test_each_app_depends_on_exactly_its_library(
    binary_project: str, libraries: tuple[str, ...]
) -> None:
    workspace = load_workspace(REPO)

    assert tuple(p.key for p in workspace.closure(binary_project)) == libraries


def test_each_library_knows_its_dependents() -> None:
    workspace = load_workspace(REPO)

    assert workspace.dependents("mesh-api") == ("mesh-discovery", "meshctl")
    assert workspace.dependents("mesh-config") == ("mesh-agent",)


def test_the_root_declares_the_libraries_as_workspace_sources() -> None:
    root = tomllib.loads((REPO / "pyproject.toml").read_text())
    uv = root["tool"]["uv"]

    assert uv["sources"] == {name: {"workspace": True} for name in LIBRARIES}
    members = uv["workspace"]["members"]
    assert all((REPO / member / "pyproject.toml").is_file() for member in members)
    assert set(LIBRARIES.values()) <= set(members)
    # The platform-specific dependency moved with the config code.
    agent = tomllib.loads((MESH / "agent" / "pyproject.toml").read_text())["project"]
    config = tomllib.loads((MESH / "libs/config/pyproject.toml").read_text())["project"]
    assert agent["dependencies"] == ["mesh-config"]
    assert config["dependencies"] == ["PyYAML>=6"]


def test_the_plan_shares_one_wheel_action_per_library(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert shipyard_main(["plan", "--json", "-f", str(REPO / "binaries.yaml")]) == 0
    actions = {a["id"]: a for a in json.loads(capsys.readouterr().out)["actions"]}

    api, config = (f"wheel:{folder}" for folder in LIBRARIES.values())
    assert [a for a in actions if a == api] == [api]
    assert [a for a in actions if a == config] == [config]
    for user in ("zipapp:meshctl", "image:meshctl", "zipapp:mesh-discovery"):
        assert api in actions[user]["deps"], actions[user]
        assert config not in actions[user]["deps"], actions[user]
    assert api in actions["image:mesh-discovery"]["deps"]
    for user in ("zipapp:mesh-agent", "image:mesh-agent"):
        assert config in actions[user]["deps"], actions[user]
        assert api not in actions[user]["deps"], actions[user]
    assert actions["zipapp:echo"]["deps"] == ["wheel:examples/mesh/echo"]


# --- mesh-api, run in-process -----------------------------------------------------------------


def test_server_and_client_share_the_library_s_service_record() -> None:
    import meshctl
    import meshdiscovery

    assert meshctl.Service is meshdiscovery.Service is Service
    assert meshctl.DiscoveryClient is DiscoveryClient
    assert meshdiscovery.InvalidServiceError is InvalidServiceError


@pytest.mark.parametrize(
    ("name", "address", "message"),
    [
        ("Web", "10.0.0.1:80", "invalid service name 'Web'"),
        ("-web", "10.0.0.1:80", "invalid service name '-web'"),
        ("x" * 64, "10.0.0.1:80", "invalid service name"),
        ("web", "", "'address' must be a non-empty string"),
        ("web", 8080, "'address' must be a non-empty string"),
        ("web", "a b", "invalid address 'a b'"),
        ("web", "x" * 260, "at most 259 characters"),
    ],
)
def test_service_rules_refuse_bad_names_and_addresses(
    name: str, address: object, message: str
) -> None:
    with pytest.raises(InvalidServiceError) as refused:
        Service.checked(name, address)
    assert message in str(refused.value)
    # The registry applies the library's rules, so the server refuses the same records.
    with pytest.raises(InvalidServiceError):
        Registry().register(name, address)  # type: ignore[arg-type]


def test_service_records_round_trip_through_json() -> None:
    service = Service.checked("web", "10.0.0.7:8080")

    assert Service.from_json(json.loads(json.dumps(service.to_json()))) == service
    assert meshapi.service_path("a/b c") == "/v1/services/a%2Fb%20c"
    with pytest.raises(InvalidServiceError, match="not a service record"):
        Service.from_json({"name": "web"})


def test_the_library_client_drives_the_discovery_server(discovery: DiscoveryServer) -> None:
    client = DiscoveryClient(discovery.url + "/")

    assert client.register("web", "10.0.0.7:8080") == Service("web", "10.0.0.7:8080")
    assert client.get("web") == Service("web", "10.0.0.7:8080")
    assert client.services() == [Service("web", "10.0.0.7:8080")]
    client.deregister("web")
    with pytest.raises(DiscoveryRequestError) as missing:
        client.get("web")
    assert missing.value.status == 404
    assert str(missing.value) == "service 'web' is not registered"


def test_the_client_reports_a_server_that_is_not_discovery() -> None:
    class NotDiscovery(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'[{"name": "web"}]' if self.path == "/v1/services" else b"<html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    impostor = ThreadingHTTPServer(("127.0.0.1", 0), NotDiscovery)
    with serving(impostor):
        client = DiscoveryClient(f"http://127.0.0.1:{impostor.server_address[1]}")
        with pytest.raises(DiscoveryProtocolError, match="unexpected service entry"):
            client.services()
        with pytest.raises(DiscoveryProtocolError, match="did not answer with JSON"):
            client.get("web")


def test_the_client_reports_unreachable_discovery() -> None:
    url = f"http://127.0.0.1:{closed_port()}"

    with pytest.raises(DiscoveryUnreachableError) as down:
        DiscoveryClient(url, timeout=2).services()
    assert str(down.value).startswith(f"cannot reach mesh-discovery at {url} (")


def test_meshctl_defaults_to_the_port_discovery_listens_on() -> None:
    from meshctl import cli

    assert cli.DEFAULT_DISCOVERY.endswith(f":{meshapi.DEFAULT_PORT}")
    assert meshapi.DEFAULT_PORT == 15010


# --- mesh-config, run in-process --------------------------------------------------------------


def test_config_parses_with_libyaml_exactly_when_pyyaml_has_it(tmp_path: Path) -> None:
    config = tmp_path / "mesh.yaml"
    config.write_text("host: 10.0.0.1\nnested: {a: [1, 2]}\n")

    assert meshconfig.YAML_NATIVE is yaml.__with_libyaml__
    assert load_yaml(config) == {"host": "10.0.0.1", "nested": {"a": [1, 2]}}
    assert load_agent_config(_write(tmp_path, "")) == AgentConfig()
    assert load_agent_config(_write(tmp_path, "port: 15021\n")) == AgentConfig(port=15021)


def _write(folder: Path, text: str) -> Path:
    path = folder / "agent.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("port: yes\n", "'port' must be an integer 0-65535, got True"),
        ("host: ''\n", "'host' must be a non-empty string"),
        ("hots: x\n", "unknown setting(s) hots; known: host, port"),
        ("- port\n", "expected a mapping of settings, got list"),
        ("port: [\n", "is not valid YAML"),
        ("!!python/object:os.system {}\n", "is not valid YAML"),  # the safe loader refuses
    ],
)
def test_config_errors_name_the_file_and_the_fix(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)

    with pytest.raises(ConfigError) as refused:
        load_agent_config(path)
    assert str(path) in str(refused.value)
    assert message in str(refused.value)


def test_config_reports_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_yaml(tmp_path / "missing.yaml")


def test_mesh_agent_uses_the_library_for_its_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import meshagent

    assert meshagent.AgentConfigError is ConfigError
    assert meshagent.load_config is load_agent_config
    assert agent_main(["--config", str(_write(tmp_path, "port: 70000\n")), "--once"]) == 1
    assert capsys.readouterr().err == (
        f"mesh-agent: {tmp_path / 'agent.yaml'}: 'port' must be an integer 0-65535, got 70000\n"
    )


# --- --libs: which library (and version) each app runs with ----------------------------------


@pytest.mark.parametrize(
    ("main", "library"),
    [(ctl_main, "mesh-api"), (discovery_main, "mesh-api"), (agent_main, "mesh-config")],
)
def test_libs_flag_prints_the_library_and_its_version(
    main: Callable[[Sequence[str]], int], library: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--libs"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"{library} {expected_version(library)}\n"


def test_libraries_are_stamped_like_the_apps() -> None:
    # A release checks that every wheel it builds carries the release's version.
    for folder in LIBRARIES.values():
        pyproject = tomllib.loads((REPO / folder / "pyproject.toml").read_text())
        assert pyproject["project"]["dynamic"] == ["version"]
        assert pyproject["tool"]["hatch"]["version"] == {
            "source": "code",
            "path": "version_stamp.py",
        }
        stamp = (REPO / folder / "version_stamp.py").read_text()
        assert stamp == (MESH / "ctl" / "version_stamp.py").read_text()
