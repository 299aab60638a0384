"""mesh-agent: the mesh's node agent, serving health and readiness endpoints."""

from meshagent.config import YAML_NATIVE, AgentConfig, AgentConfigError, load_config, parse_config
from meshagent.health import HealthServer, health_report

__all__ = [
    "YAML_NATIVE",
    "AgentConfig",
    "AgentConfigError",
    "HealthServer",
    "health_report",
    "load_config",
    "parse_config",
]
