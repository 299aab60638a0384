"""mesh-config: reading YAML files and validating mesh-agent's settings."""

from pathlib import Path

import pytest
from meshconfig import AgentConfig, ConfigError, load_agent_config, load_yaml, parse_agent_config


def test_an_empty_document_means_every_setting_is_unset() -> None:
    assert parse_agent_config(None) == AgentConfig(host=None, port=None)


def test_valid_settings_are_kept() -> None:
    config = parse_agent_config({"host": "0.0.0.0", "port": 15021})
    assert config == AgentConfig(host="0.0.0.0", port=15021)


def test_unknown_settings_are_named_with_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"agent\.yaml: unknown setting\(s\) bind, hots"):
        parse_agent_config({"hots": "x", "bind": 1}, source="agent.yaml")


@pytest.mark.parametrize("port", [True, -1, 65536, "8080", 1.5])
def test_a_port_must_be_an_integer_in_range(port: object) -> None:
    with pytest.raises(ConfigError, match="'port' must be an integer 0-65535"):
        parse_agent_config({"port": port})


@pytest.mark.parametrize("data", [["host", "port"], "host: x", 42])
def test_the_document_must_be_a_mapping(data: object) -> None:
    with pytest.raises(ConfigError, match="expected a mapping of settings"):
        parse_agent_config(data)


def test_an_empty_host_is_refused() -> None:
    with pytest.raises(ConfigError, match="'host' must be a non-empty string"):
        parse_agent_config({"host": ""})


def test_load_agent_config_reads_a_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("host: 127.0.0.1\nport: 0\n", encoding="utf-8")
    assert load_agent_config(path) == AgentConfig(host="127.0.0.1", port=0)


def test_load_yaml_errors_name_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("host: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"broken\.yaml is not valid YAML"):
        load_yaml(broken)
    with pytest.raises(ConfigError, match=r"cannot read config .*missing\.yaml"):
        load_yaml(tmp_path / "missing.yaml")
