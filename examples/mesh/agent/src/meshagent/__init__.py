"""mesh-agent: the mesh's node agent, serving health and readiness endpoints.

Its config file is read by the mesh-config library (``meshconfig``); the names below
keep the ones code imported from meshagent before that library existed.
"""

from meshconfig import YAML_NATIVE, AgentConfig
from meshconfig import ConfigError as AgentConfigError
from meshconfig import load_agent_config as load_config
from meshconfig import parse_agent_config as parse_config

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
