"""The mesh-agent's config file: where to serve the health endpoints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from meshconfig.yamlfile import ConfigError, load_yaml

__all__ = ["AgentConfig", "load_agent_config", "parse_agent_config"]

_KEYS = ("host", "port")


@dataclass(frozen=True)
class AgentConfig:
    """Settings from the config file; None means "not set", so flags and defaults apply."""

    host: str | None = None
    port: int | None = None


def parse_agent_config(data: object, source: str = "config") -> AgentConfig:
    """Validate the parsed YAML document ``data`` (None for an empty file)."""
    if data is None:
        return AgentConfig()
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of settings, got {type(data).__name__}")
    unknown = sorted(str(key) for key in data if key not in _KEYS)
    if unknown:
        raise ConfigError(
            f"{source}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(_KEYS)}"
        )
    host, port = data.get("host"), data.get("port")
    if host is not None and (not isinstance(host, str) or not host):
        raise ConfigError(f"{source}: 'host' must be a non-empty string, got {host!r}")
    # bool is an int subclass, and `port: yes` is a classic YAML slip worth rejecting.
    if port is not None and (
        not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535
    ):
        raise ConfigError(f"{source}: 'port' must be an integer 0-65535, got {port!r}")
    return AgentConfig(host=host, port=port)


def load_agent_config(path: Path) -> AgentConfig:
    """Read and validate the agent's YAML config file at ``path``."""
    return parse_agent_config(load_yaml(path), source=str(path))
